"""PPO with a learned critic: GAE over token rewards with the KL to the reference folded in.

See "Proximal Policy Optimization Algorithms" (1707.06347), "Training language models to follow
instructions with human feedback" (2203.02155, the KL-in-reward objective) and "The N+
Implementation Details of RLHF with PPO: A Case Study on TL;DR Summarization" (2403.17031). For
completion b with score s_b (task reward), tokens t of its completion (mask m):

    r_t   = s_b [t = last] - beta * (log pi_old(o_t) - log pi_ref(o_t))      (k1, per token)
    A     = GAE(r, V_old; gamma, lambda)              whitened over the batch's tokens
    R     = A' + V_old,  A' = GAE(r, V_old; gamma, lambda_critic)   (lambda_critic = lambda
                                                      by default; VC-PPO decouples them)
    actor:  agg_t[ max(-A_t rho_t, -A_t clip(rho_t, 1 - e_low, 1 + e_high)) ] - c_H H
    critic: 0.5 agg_t[ max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2) ]

With dense process rewards (`config.rewards.process_placement = "dense"`, "On Designing
Effective RL Reward at Training Time for LLM Reasoning", 2410.15115), a process reward model's
refined step rewards p'_k leave s_b for the last token of their step c_k:

    r_t   = (s_b - sum_k p'_k) [t = last] + sum_k p'_k [t = c_k] - beta * kl_t

the same undiscounted return, with each step's reward where GAE can credit the tokens before it.

beta is fixed, or moved toward a target KL by the adaptive controller of "Fine-Tuning Language
Models from Human Preferences" (1909.08593). The critic is a `ScalarHeadModel` (its own train
state and optimizer, see `jaxrl_llm.roles.critic`), initialised from the policy's trunk or from a
saved scalar-head model (a reward model). Which N+ details apply to a verifiable reward, and
their defaults here: docs/ppo.md.

The levers of "Is DPO Superior to PPO for LLM Alignment? A Comprehensive Study" (Xu et al.,
2404.10719) and of VC-PPO ("What's Behind PPO's Collapse in Long-CoT? Value Optimization Holds
the Secret", 2503.01491) are config fields: advantage whitening (`loss.whiten_advantages`), a
large batch (`rollout.num_prompts`, with `train.grad_accumulation` to fit it), a reference that
is a moving average of the policy (`reference.ema_decay`), decoupled lambdas
(`loss.critic_lam`) and value pretraining (`critic.pretrain_steps`); docs/ppo.md tabulates them.
"""

from __future__ import annotations

import functools

import jax
import ml_collections
import numpy as np

from jaxrl_llm import advantages as advantages_lib
from jaxrl_llm import losses
from jaxrl_llm.algorithms import registry
from jaxrl_llm.algorithms.base import Algorithm, Experience, roles_for
from jaxrl_llm.algorithms.batch import PolicyBatch, build_batch
from jaxrl_llm.algorithms.policy_loss import (
    PolicyLossConfig,
    norm_len_for,
    policy_loss,
    policy_loss_section,
    validate_loss_section,
)
from jaxrl_llm.roles.reference import reference_section, validate_reference_section
from jaxrl_llm.rollout.types import FinishReason

__all__ = ["critic_lam_of", "default_config", "kl_shaped_token_rewards", "make", "validate"]


def default_config() -> dict[str, ml_collections.ConfigDict]:
    """PPO's sections: `loss` (actor, KL-in-reward, GAE) and `critic` (the value model)."""
    loss = policy_loss_section(clip_low=0.2, clip_high=0.2, kl_beta=0.05, kl_estimator="k1")
    # GAE discount and lambda (1.0 / 0.95 as verl, OpenRLHF and TRL for language rewards).
    loss.gamma = 1.0
    loss.lam = 0.95
    # GAE lambda of the critic's targets (the returns), decoupled from the actor's `lam`
    # (VC-PPO, 2503.01491, uses 1.0: Monte Carlo returns, no bootstrap from a biased critic);
    # -1 takes `lam`.
    loss.critic_lam = -1.0
    # Adaptive KL controller: target KL per token (0 keeps kl_beta fixed) and its horizon.
    loss.kl_target = 0.0
    loss.kl_horizon = 10_000
    # Whiten the advantages over the batch's completion tokens (N+ detail).
    loss.whiten_advantages = True
    # Subtracted from the score of a completion that ran out of tokens without an end-of-turn
    # token (N+ "EOS trick"); 0 disables.
    loss.missing_eos_penalty = 0.0

    critic = ml_collections.ConfigDict()
    # "policy": a copy of the policy's trunk with a fresh scalar head; or the directory of a
    # saved scalar-head model (`jaxrl_llm.models.save_scalar_model`, e.g. a reward model).
    critic.init = "policy"
    # The critic's own AdamW: peak learning rate, warmup (updates) and gradient clip.
    critic.learning_rate = 5e-5
    critic.warmup_steps = 0
    critic.max_grad_norm = 1.0
    # Half-width of the value clip around the rollout-time values; 0 disables it.
    critic.value_clip = 0.2
    # RL steps at the start that train only the critic (the policy is left unchanged).
    critic.warmup_rl_steps = 0
    # Value pretraining (VC-PPO, 2503.01491): before the first RL step, this many batches of the
    # initial policy's rollouts train the critic alone, on Monte Carlo returns (lambda 1); not
    # counted in train.num_steps. 0 disables it.
    critic.pretrain_steps = 0
    # The reference policy of the KL penalty: frozen, or an exponential moving average of the
    # policy (Xu et al., 2404.10719); see jaxrl_llm/roles/reference.py.
    return {"loss": loss, "critic": critic, "reference": reference_section()}


def critic_lam_of(loss: ml_collections.ConfigDict) -> float:
    """The GAE lambda of the critic's targets: `loss.critic_lam`, or `loss.lam` for -1 (or
    None, or a config written before the field existed)."""
    critic_lam = loss.get("critic_lam", -1.0)
    return loss.lam if critic_lam is None or critic_lam == -1 else critic_lam


def validate(config: ml_collections.ConfigDict) -> None:
    """PPO's rules: the shared loss fields, GAE in [0, 1], a sane critic, the reference."""
    validate_loss_section(config)
    for name in ("gamma", "lam"):
        value = config.loss[name]
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"config.loss.{name}={value} must be in [0, 1].")
    if not 0.0 <= critic_lam_of(config.loss) <= 1.0:
        raise ValueError(
            f"config.loss.critic_lam={config.loss.critic_lam} must be in [0, 1], or -1 to take "
            "config.loss.lam."
        )
    if config.loss.kl_target < 0 or config.loss.kl_horizon <= 0:
        raise ValueError(
            f"config.loss.kl_target={config.loss.kl_target} must be >= 0 (0 = fixed kl_beta) "
            f"and config.loss.kl_horizon={config.loss.kl_horizon} > 0."
        )
    if config.loss.kl_target > 0 and config.loss.kl_beta <= 0:
        raise ValueError(
            "config.loss.kl_target > 0 (adaptive KL) needs a starting config.loss.kl_beta > 0."
        )
    critic = config.critic
    if not critic.learning_rate > 0:
        raise ValueError(f"config.critic.learning_rate={critic.learning_rate} must be > 0.")
    if critic.value_clip < 0 or critic.warmup_rl_steps < 0:
        raise ValueError(
            "config.critic.value_clip and config.critic.warmup_rl_steps must be >= 0 "
            f"(got {critic.value_clip}, {critic.warmup_rl_steps})."
        )
    pretrain = critic.pretrain_steps
    if not isinstance(pretrain, int) or pretrain < 0:
        raise ValueError(
            f"config.critic.pretrain_steps={pretrain!r} must be an int >= 0 (0: no value "
            "pretraining)."
        )
    if not isinstance(critic.init, str) or not critic.init:
        raise ValueError(
            f"config.critic.init={critic.init!r} must be 'policy' or a scalar-head model directory."
        )
    validate_reference_section(config)


def kl_shaped_token_rewards(
    scores_b,
    mask_bt,
    old_logp_bt,
    ref_logp_bt,
    *,
    beta,
    estimator: str,
    step_rewards_bs=None,
    step_columns_bs=None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Token rewards [B, T]: each score on its completion's last token, minus beta * KL per token.

    With `step_rewards_bs` / `step_columns_bs` ([B, S], dense process rewards) each step's reward
    moves from the score to the token its step ends on (`losses.step_token_rewards`). With
    `ref_logp_bt` None (or beta 0) only the scores are placed. Metrics: "kl" (mean over
    sequences of the per-token KL), "kl_sum", "kl_penalty", zeros without a reference.
    """
    if step_rewards_bs is None:
        rewards_bt = losses.last_token_rewards(scores_b, mask_bt)
    else:
        step_rewards_bs = np.asarray(step_rewards_bs, np.float32)
        outcome_b = np.asarray(scores_b, np.float32) - step_rewards_bs.sum(axis=1)
        rewards_bt = losses.step_token_rewards(
            outcome_b, step_rewards_bs, np.asarray(step_columns_bs, np.int32), mask_bt
        )
    if ref_logp_bt is None:
        zero = np.float32(0.0)
        return rewards_bt, {"kl": zero, "kl_sum": zero, "kl_penalty": zero}
    return losses.kl_in_reward(
        rewards_bt, old_logp_bt, ref_logp_bt, mask_bt, beta=beta, estimator=estimator
    )


def completion_scores(experience: Experience, missing_eos_penalty: float) -> np.ndarray:
    """The rewards [B], less `missing_eos_penalty` where a completion hit the length limit."""
    scores = np.asarray(experience.rewards, np.float32)
    if missing_eos_penalty:
        truncated = np.asarray(experience.rollout.finish_reason) == FinishReason.LENGTH
        scores = scores - missing_eos_penalty * truncated.astype(np.float32)
    return scores


def make(config: ml_collections.ConfigDict) -> Algorithm:
    """PPO from a run config (roles: actor, rollout, reward, critic, and reference if beta > 0)."""
    loss_cfg = config.loss
    actor_loss_config = PolicyLossConfig.from_config(config, kl_beta=0.0)  # KL is in the reward
    gamma, lam, critic_lam = loss_cfg.gamma, loss_cfg.lam, critic_lam_of(loss_cfg)
    adaptive = loss_cfg.kl_target > 0
    value_clip = config.critic.value_clip or None
    norm_len = norm_len_for(loss_cfg.agg, config.rollout.max_new_tokens)
    remat = config.train.remat
    dense = config.rewards.get("process_placement", "summed") == "dense"

    def init() -> losses.AdaptiveKLState:
        return losses.adaptive_kl_init(loss_cfg.kl_beta)

    def make_batch(
        experience: Experience, state, *, returns_lam: float = critic_lam
    ) -> tuple[PolicyBatch, dict[str, float]]:
        rollout = experience.rollout
        mask_bt = np.asarray(rollout.completion_mask, np.float32)
        old_logp_bt = np.asarray(rollout.logprobs, np.float32)
        scores_b = completion_scores(experience, loss_cfg.missing_eos_penalty)
        if dense and experience.step_rewards is None:
            raise ValueError(
                "ppo: config.rewards.process_placement='dense' needs the experience's "
                "step_rewards / step_columns (the runner fills them when a process reward model "
                "is set: config.rewards.process_model)."
            )
        rewards_bt, kl_metrics = kl_shaped_token_rewards(
            scores_b,
            mask_bt,
            old_logp_bt,
            experience.ref_logp,
            beta=state.coef,
            estimator=loss_cfg.kl_estimator,
            step_rewards_bs=experience.step_rewards if dense else None,
            step_columns_bs=experience.step_columns if dense else None,
        )
        values_bt = np.asarray(experience.values, np.float32)
        adv_bt, returns_bt = advantages_lib.gae(
            rewards_bt, values_bt, mask_bt, gamma=gamma, lam=lam, critic_lam=returns_lam
        )
        if loss_cfg.whiten_advantages:
            adv_bt = advantages_lib.whiten(adv_bt, mask_bt)
        batch = build_batch(
            rollout,
            adv_bt,
            ref_logp=experience.ref_logp,
            returns=returns_bt,
            old_values=values_bt,
        )
        scalars = {k: float(v) for k, v in kl_metrics.items()}
        scalars["kl_coef"] = float(state.coef)
        if dense:  # steps per completion whose reward landed on a completion token
            columns = np.asarray(experience.step_columns)
            on_token = np.take_along_axis(mask_bt > 0, np.maximum(columns, 0), axis=1)
            scalars["process_steps_placed"] = float(((columns >= 0) & on_token).sum(1).mean())
        return batch, scalars

    def update(state, scalars):
        if not adaptive:
            return state
        return losses.adaptive_kl_update(
            state,
            scalars["kl"],
            scalars["batch_size"],
            target=loss_cfg.kl_target,
            horizon=loss_cfg.kl_horizon,
        )

    def actor_loss(model, batch):
        return policy_loss(model, batch, config=actor_loss_config)

    def critic_loss(critic_model, batch):
        values_bt = critic_model.token_scores(
            batch.tokens,
            positions_bt=batch.positions,
            segment_ids_bt=batch.segment_ids,
            remat=remat,
        )
        return losses.value_loss(
            values_bt,
            batch.old_values,
            batch.returns,
            batch.loss_mask,
            clip=value_clip,
            agg=loss_cfg.agg,
            norm_len=norm_len,
        )

    roles = roles_for(loss_cfg.kl_beta, "critic")
    return Algorithm(
        name="ppo",
        make_batch=make_batch,
        loss=actor_loss,
        roles=roles,
        init=init,
        update=update,
        critic_loss=critic_loss,
        actor_frozen_steps=config.critic.warmup_rl_steps,
        step_rewards=dense,
        critic_pretrain_steps=config.critic.get("pretrain_steps", 0),
        # value pretraining's targets: Monte Carlo returns (GAE with lambda 1, VC-PPO)
        critic_pretrain_batch=functools.partial(make_batch, returns_lam=1.0),
    )


registry.register("ppo", make=make, default_config=default_config, validate=validate)
