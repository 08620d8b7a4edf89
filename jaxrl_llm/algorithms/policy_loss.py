"""The clipped policy-gradient loss of a model on a `PolicyBatch`, shared by the PPO family.

GRPO, PPO, REINFORCE++ and ReMax differ in how they build advantages, not in the actor's loss:

    loss = agg_t[ max(-A_t r_t, -A_t clip(r_t, 1 - e_low, 1 + e_high)) ]
           + beta * agg_t[ kl(pi_theta, pi_ref)_t ] - c_H * agg_t[ H_t ]

with r_t = pi_theta(o_t | prefix) / pi_old(o_t | prefix). See "Proximal Policy Optimization
Algorithms" (1707.06347), DeepSeekMath (2402.03300) for the KL term in the loss, DAPO
(2503.14476) for clip-higher. Algorithms that put the KL into the reward instead (PPO,
REINFORCE++) use `kl_beta=0` here. The first term changes with `config.off_policy` (TIS, IcePop,
AReaL's decoupled PPO, LlamaRL's AIPO; `jaxrl_llm.algorithms.off_policy`). With Clip-Cov
(`clip_cov_fraction > 0`; Cui et al., 2505.22617) the first term takes no gradient from a few
tokens whose log-prob and advantage covary most (`jaxrl_llm.losses.covariance`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections

from jaxrl_llm import losses
from jaxrl_llm.algorithms.batch import PolicyBatch
from jaxrl_llm.algorithms.off_policy import OffPolicyConfig, corrected_pg_loss
from jaxrl_llm.losses.aggregation import AGG_MODES
from jaxrl_llm.losses.kl import KL_ESTIMATORS
from jaxrl_llm.training.logprobs import sequence_logprobs

Array = jax.Array

NORM_LEN_AGG = "seq-mean-token-sum-norm"


def norm_len_for(agg: str, max_new_tokens: int) -> int | None:
    """The constant divisor of `agg` (Dr. GRPO's "seq-mean-token-sum-norm"), else None.

    See "Understanding R1-Zero-Like Training: A Critical Perspective" (2503.20783): the loss of
    each sequence is its token sum divided by one constant, the generation budget.
    """
    return max_new_tokens if agg == NORM_LEN_AGG else None


def validate_loss_section(config) -> None:
    """Raises ValueError naming the first bad field of `config.loss` shared by the PPO family."""
    loss = config.loss
    for name, choices in (("agg", AGG_MODES), ("kl_estimator", KL_ESTIMATORS)):
        if loss[name] not in choices:
            raise ValueError(f"config.loss.{name}={loss[name]!r} must be one of {choices}.")
    for name in ("clip_low", "clip_high", "kl_beta", "entropy_coef"):
        if not loss[name] >= 0:
            raise ValueError(f"config.loss.{name}={loss[name]} must be >= 0.")
    if config.train.pack_sequences and loss.agg != "token-mean":
        raise ValueError(
            f"config.train.pack_sequences=True needs config.loss.agg='token-mean' (got "
            f"{loss.agg!r}): set one or the other."
        )


def policy_loss_section(**overrides) -> ml_collections.ConfigDict:
    """The `config.loss` fields every PPO-family algorithm shares, with its own defaults."""
    c = ml_collections.ConfigDict()
    # PPO clip range [1 - clip_low, 1 + clip_high] (clip_high > clip_low: DAPO's clip-higher).
    c.clip_low = 0.2
    c.clip_high = 0.28
    # KL to the frozen initial policy (in the loss for GRPO, in the reward for PPO and
    # REINFORCE++); 0 skips the reference forward.
    c.kl_beta = 0.0
    # KL estimator: k1, k2, k3, k1+, k3+.
    c.kl_estimator = "k3"
    # Entropy bonus weight.
    c.entropy_coef = 0.0
    # Loss aggregation: token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm.
    c.agg = "token-mean"
    c.update(overrides)
    return c


@dataclasses.dataclass(frozen=True)
class PolicyLossConfig:
    """Hyper-parameters of `policy_loss` (hashable: it is closed over by the jitted step).

    Attributes:
      clip_low, clip_high: PPO clip range [1 - clip_low, 1 + clip_high] (DAPO: 0.2, 0.28).
      kl_beta: weight of the KL penalty to the reference in the loss; 0 skips it.
      kl_estimator: "k1", "k2", "k3" (DeepSeekMath), or straight-through "k1+", "k3+".
      entropy_coef: weight of the entropy bonus (0: reported, not optimised).
      agg: loss aggregation mode (see `jaxrl_llm.losses.aggregate`).
      norm_len: the constant of "seq-mean-token-sum-norm" (Dr. GRPO), e.g. max_new_tokens.
      temperature: the rollout temperature; the trainer's log-probs use the same.
      logprob_implementation: `kernels.logprobs` backend, None for the device default.
      remat: gradient checkpointing per layer, a `jaxrl_llm.models.REMAT_POLICIES` name
        ("full", "dots", "none") or a bool.
      off_policy: the off-policy correction (`jaxrl_llm.algorithms.off_policy`); "none" is the
        PPO ratio against `PolicyBatch.old_logp`.
      clip_cov_fraction: Clip-Cov's r, the share of loss tokens whose policy gradient is
        dropped (0: off); the batch then carries `token_noise`, and `clip_cov_fraction` when
        the share adapts (it then replaces this one).
      clip_cov_low, clip_cov_high: Clip-Cov's covariance window [omega_low, omega_high].
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_beta: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    agg: str = "token-mean"
    norm_len: int | None = None
    temperature: float = 1.0
    logprob_implementation: str | None = None
    remat: bool | str = "full"
    off_policy: OffPolicyConfig = OffPolicyConfig()
    clip_cov_fraction: float = 0.0
    clip_cov_low: float = 1.0
    clip_cov_high: float = 5.0

    @classmethod
    def from_config(cls, config, *, kl_beta: float | None = None) -> PolicyLossConfig:
        """From a run config: `config.loss` (clip, KL, entropy, agg), rollout and train fields.

        Args:
          config: a run config (`jaxrl_llm.config`).
          kl_beta: overrides `config.loss.kl_beta` (0 for algorithms with the KL in the reward).
        """
        loss = config.loss
        stabilise = config.get("stabilise") or {}
        return cls(
            clip_low=loss.clip_low,
            clip_high=loss.clip_high,
            kl_beta=loss.kl_beta if kl_beta is None else kl_beta,
            kl_estimator=loss.kl_estimator,
            entropy_coef=loss.entropy_coef,
            agg=loss.agg,
            norm_len=norm_len_for(loss.agg, config.rollout.max_new_tokens),
            temperature=config.rollout.temperature,
            remat=config.train.remat,
            off_policy=OffPolicyConfig.from_config(config),
            # a config without these fields (written before Clip-Cov) keeps it off
            clip_cov_fraction=stabilise.get("clip_cov_fraction", cls.clip_cov_fraction),
            clip_cov_low=stabilise.get("clip_cov_low", cls.clip_cov_low),
            clip_cov_high=stabilise.get("clip_cov_high", cls.clip_cov_high),
        )


def policy_loss(
    model, batch: PolicyBatch, *, config: PolicyLossConfig
) -> tuple[Array, dict[str, Array]]:
    """The clipped policy-gradient objective of one minibatch (see the module docstring).

    Args:
      model: the policy (`Transformer`), merged inside the jitted step.
      batch: a `PolicyBatch`; `advantages` [M] or [M, T].
      config: a `PolicyLossConfig`.

    Returns:
      (scalar loss, metrics): policy loss, KL to the reference (when in the loss), entropy, clip
      fractions and ratio statistics, each a scalar.
    """
    mask = batch.loss_mask
    if batch.segment_ids is not None and config.agg != "token-mean":
        raise ValueError(
            f"policy_loss: packed batches support agg='token-mean' only, got agg={config.agg!r} "
            "(a packed row does not know its sequences' counts): set config.loss.agg="
            "'token-mean' or config.train.pack_sequences=False."
        )
    logp, entropy = sequence_logprobs(
        model,
        batch.tokens,
        temperature=config.temperature,
        return_entropy=True,
        implementation=config.logprob_implementation,
        remat=config.remat,
        positions_bt=batch.positions,
        segment_ids_bt=batch.segment_ids,
    )
    logp_pg, cov_metrics = _clip_cov(logp, batch, config)
    pg_loss, metrics = corrected_pg_loss(
        logp_pg,
        batch,
        off_policy=config.off_policy,
        clip_low=config.clip_low,
        clip_high=config.clip_high,
        agg=config.agg,
        norm_len=config.norm_len,
    )
    loss = pg_loss
    metrics = dict(metrics, pg_loss=pg_loss, **cov_metrics)
    if config.kl_beta > 0:
        kl_bt = losses.kl(
            logp, jax.lax.stop_gradient(batch.ref_logp), estimator=config.kl_estimator
        )
        kl_value = losses.aggregate(kl_bt, mask, mode=config.agg, norm_len=config.norm_len)
        loss = loss + config.kl_beta * kl_value
        metrics["kl_ref"] = losses.masked_mean(kl_bt, mask)
    entropy_mean = losses.masked_mean(entropy, mask)
    if batch.entropy_coef is not None:  # adaptive: a per-row (or per-token) data field
        coef = batch.entropy_coef if batch.entropy_coef.ndim == 2 else batch.entropy_coef[:, None]
        loss = loss - losses.aggregate(
            coef * entropy, mask, mode=config.agg, norm_len=config.norm_len
        )
    elif config.entropy_coef > 0:
        loss = loss - config.entropy_coef * losses.aggregate(
            entropy, mask, mode=config.agg, norm_len=config.norm_len
        )
    metrics["entropy"] = jax.lax.stop_gradient(entropy_mean)
    return loss, metrics


def _clip_cov(logp_bt: Array, batch: PolicyBatch, config: PolicyLossConfig):
    """`logp_bt` with the gradient stopped at Clip-Cov's chosen tokens, and its metrics.

    Without Clip-Cov (`clip_cov_fraction == 0`): `logp_bt` unchanged and no metrics. The KL
    and entropy terms keep every token's gradient; only the policy-gradient term drops some.
    """
    if config.clip_cov_fraction <= 0:
        return logp_bt, {}
    if batch.token_noise is None:
        raise ValueError(
            "policy_loss: clip_cov_fraction > 0 needs PolicyBatch.token_noise (uniform [0, 1) "
            "draws per token, new every step); the runners fill it when "
            "config.stabilise.clip_cov_fraction > 0."
        )
    fraction = config.clip_cov_fraction
    if batch.clip_cov_fraction is not None:  # adaptive: every row holds the step's share (the
        fraction = jnp.max(batch.clip_cov_fraction)  # padding of packed rows holds 0)
    cov_bt = losses.token_covariance(logp_bt, batch.advantages, batch.loss_mask)
    chosen_bt, metrics = losses.clip_cov_selection(
        cov_bt,
        batch.loss_mask,
        batch.token_noise,
        fraction=fraction,
        low=config.clip_cov_low,
        high=config.clip_cov_high,
    )
    logp_bt = jnp.where(chosen_bt, jax.lax.stop_gradient(logp_bt), logp_bt)
    return logp_bt, {f"clip_cov/{name}": value for name, value in metrics.items()}
