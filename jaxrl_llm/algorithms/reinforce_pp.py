"""REINFORCE++: critic-free PPO-clip with whitened discounted returns of KL-shaped token rewards.

See "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models"
(2501.03262), eqs. (5)-(7). For completion b with score s_b:

    r_t = s_b [t = last] - beta * kl(pi_old, pi_ref)_t         (token rewards, KL in the reward)
    G_t = sum_{s >= t} gamma^(s - t) r_s                       (discounted return)
    A_t = (G_t - mean(G)) / std(G)                             (whitened over the whole batch)

and the actor minimises the PPO-clip surrogate with these per-token advantages. No critic, no
group baseline: the global whitening is the baseline (the paper's argument against per-prompt
normalisation).
"""

from __future__ import annotations

import ml_collections
import numpy as np

from jaxrl_llm import advantages as advantages_lib
from jaxrl_llm.algorithms import registry
from jaxrl_llm.algorithms.base import Algorithm, Experience, roles_for
from jaxrl_llm.algorithms.batch import PolicyBatch, build_batch
from jaxrl_llm.algorithms.policy_loss import (
    PolicyLossConfig,
    policy_loss,
    policy_loss_section,
    validate_loss_section,
)
from jaxrl_llm.algorithms.ppo import kl_shaped_token_rewards

__all__ = ["default_config", "make", "validate"]


def default_config() -> dict[str, ml_collections.ConfigDict]:
    """REINFORCE++'s `loss` section: the shared fields (KL in the reward, k1) and gamma."""
    loss = policy_loss_section(clip_low=0.2, clip_high=0.2, kl_beta=0.01, kl_estimator="k1")
    # Discount of the token returns (the paper and the peers use 1.0).
    loss.gamma = 1.0
    return {"loss": loss}


def validate(config: ml_collections.ConfigDict) -> None:
    """REINFORCE++'s rules: the shared loss fields and gamma in [0, 1]."""
    validate_loss_section(config)
    if not 0.0 <= config.loss.gamma <= 1.0:
        raise ValueError(f"config.loss.gamma={config.loss.gamma} must be in [0, 1].")


def make(config: ml_collections.ConfigDict) -> Algorithm:
    """REINFORCE++ from a run config; a "reference" role when `config.loss.kl_beta > 0`."""
    loss_cfg = config.loss
    actor_loss_config = PolicyLossConfig.from_config(config, kl_beta=0.0)  # KL is in the reward

    def make_batch(experience: Experience, state) -> tuple[PolicyBatch, dict[str, float]]:
        del state
        rollout = experience.rollout
        mask_bt = np.asarray(rollout.completion_mask, np.float32)
        rewards_bt, kl_metrics = kl_shaped_token_rewards(
            np.asarray(experience.rewards, np.float32),
            mask_bt,
            np.asarray(rollout.logprobs, np.float32),
            experience.ref_logp,
            beta=loss_cfg.kl_beta,
            estimator=loss_cfg.kl_estimator,
        )
        adv_bt = advantages_lib.reinforce_pp(rewards_bt, mask_bt, gamma=loss_cfg.gamma)
        batch = build_batch(rollout, adv_bt, ref_logp=experience.ref_logp)
        return batch, {k: float(v) for k, v in kl_metrics.items()}

    def loss(model, batch):
        return policy_loss(model, batch, config=actor_loss_config)

    roles = roles_for(loss_cfg.kl_beta)
    return Algorithm(name="reinforce_pp", make_batch=make_batch, loss=loss, roles=roles)


registry.register("reinforce_pp", make=make, default_config=default_config, validate=validate)
