"""Off-policy corrections of the policy-gradient loss, behind one config (`config.off_policy`).

A sample is off-policy when the weights that generated it (the behaviour policy mu, version v)
are older than the weights being trained (version u > v: asynchronous training, see
`jaxrl_llm.runners.online_async`), or when the rollout engine's numerics differ from the
trainer's. With pi_theta the policy being optimised, pi_prox the learner's weights at the start
of the step (log-probs recomputed by the learner) and mu the behaviour policy (log-probs the
rollout reported):

    none            PPO clip of pi_theta / mu (the ratio is taken against the behaviour policy;
                    AReaL's "naive PPO")
    tis             w * PPO clip of pi_theta / pi_prox, w = min(pi_prox / mu, high), per token or
                    per sequence (truncated IS; Yao et al. 2025, verl's rollout correction)
    icepop          as tis, with w = 0 outside [low, high] instead of truncation (2510.18855)
    decoupled_ppo   as tis, with w = pi_prox / mu uncapped: AReaL's decoupled PPO objective
                    (behaviour, proximal and current policies; arXiv:2505.24298)
    aipo            -min(pi_theta / mu, rho) A log pi_theta, no PPO clip, rho = high
                    (LlamaRL's AIPO, arXiv:2505.24034)

Every mode reports the same diagnostics against the behaviour policy: the effective sample size
of pi_theta / mu and the KL(mu || pi_theta) estimate.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections

from jaxrl_llm import losses
from jaxrl_llm.losses.off_policy import IS_LEVELS
from jaxrl_llm.losses.ratios import LOG_RATIO_CLAMP

Array = jax.Array

CORRECTIONS = ("none", "tis", "icepop", "decoupled_ppo", "aipo")
# Corrections whose PPO ratio is against the proximal policy (the learner recomputes it).
PROXIMAL_CORRECTIONS = ("tis", "icepop", "decoupled_ppo")


def off_policy_section() -> ml_collections.ConfigDict:
    """The `config.off_policy` fields (see the module docstring)."""
    c = ml_collections.ConfigDict()
    # none, tis, icepop, decoupled_ppo, aipo.
    c.correction = "none"
    # "token" or "sequence" importance weights (tis, icepop).
    c.level = "token"
    # Weight bounds: tis truncates at `high`, icepop masks outside [low, high], aipo caps at
    # rho = `high`; decoupled_ppo ignores both. low = 0 means no lower bound.
    c.low = 0.0
    c.high = 2.0
    return c


def validate_off_policy_section(config) -> None:
    """Raises ValueError naming the first bad `config.off_policy` field and the fix."""
    section = config.off_policy
    if section.correction not in CORRECTIONS:
        raise ValueError(
            f"config.off_policy.correction={section.correction!r} must be one of {CORRECTIONS}."
        )
    if section.level not in IS_LEVELS:
        raise ValueError(f"config.off_policy.level={section.level!r} must be one of {IS_LEVELS}.")
    if not 0 <= section.low < section.high:
        raise ValueError(
            f"config.off_policy.low={section.low} and high={section.high} must satisfy "
            "0 <= low < high."
        )
    if section.level == "sequence" and config.train.pack_sequences:
        raise ValueError(
            "config.off_policy.level='sequence' needs config.train.pack_sequences=False (a packed "
            "row holds several sequences): set one or the other."
        )


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    """The hashable form of `config.off_policy` closed over by the jitted train step."""

    correction: str = "none"
    level: str = "token"
    low: float = 0.0
    high: float = 2.0

    @classmethod
    def from_config(cls, config) -> OffPolicyConfig:
        s = config.off_policy
        return cls(correction=s.correction, level=s.level, low=s.low, high=s.high)

    @property
    def needs_proximal(self) -> bool:
        """Whether the runner must recompute the learner's log-probs (`PolicyBatch.old_logp`)."""
        return self.correction in PROXIMAL_CORRECTIONS


def behaviour_diagnostics(
    logp_bt: Array, behaviour_logp_bt: Array, mask_bt: Array
) -> dict[str, Array]:
    """How far the current policy is from the one that sampled the tokens.

    With r_t = pi_theta(o_t) / mu(o_t) over the N valid tokens:

        ess          (sum r)^2 / (N sum r^2), in (0, 1]; 1 when every ratio is equal
        kl_behaviour mean of (r - 1) - log r, the k3 estimate of KL(mu || pi_theta)

    Args:
      logp_bt, behaviour_logp_bt: [B, T] log-probs under the current and behaviour policies.
      mask_bt: [B, T], nonzero where a token counts.

    Returns:
      {"ess", "kl_behaviour"}, scalars without gradient.
    """
    valid = mask_bt > 0
    log_r = jnp.clip(
        jax.lax.stop_gradient(logp_bt) - behaviour_logp_bt, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP
    )
    r = jnp.where(valid, jnp.exp(log_r), 0.0)
    n = jnp.maximum(valid.sum(), 1)
    ess = jnp.square(r.sum()) / jnp.maximum(n * jnp.square(r).sum(), 1e-30)
    k3 = jnp.where(valid, jnp.exp(log_r) - 1.0 - log_r, 0.0)
    return {"ess": ess, "kl_behaviour": k3.sum() / n}


def corrected_pg_loss(
    logp_bt: Array,
    batch,
    *,
    off_policy: OffPolicyConfig,
    clip_low: float,
    clip_high: float,
    agg: str,
    norm_len: int | None,
) -> tuple[Array, dict[str, Array]]:
    """The policy-gradient term of `policy_loss` under `off_policy.correction`.

    Args:
      logp_bt: [M, T] log-probs under the policy being optimised.
      batch: a `PolicyBatch`; `old_logp` is the proximal policy's log-probs for the
        PROXIMAL_CORRECTIONS (the behaviour's otherwise) and `rollout_logp` the behaviour's
        (required unless the correction is "none").
      off_policy: the correction.
      clip_low, clip_high, agg, norm_len: the PPO clip range and aggregation.

    Returns:
      (scalar loss, metrics); with `rollout_logp` the metrics add "off_policy/ess" and
      "off_policy/kl_behaviour", and the importance-weight statistics when weights are used.
    """
    mask, adv = batch.loss_mask, batch.advantages
    correction = off_policy.correction
    if correction != "none" and batch.rollout_logp is None:
        raise ValueError(
            f"off_policy.correction={correction!r} needs the behaviour log-probs "
            "(PolicyBatch.rollout_logp); the runners fill it from the rollout."
        )
    metrics: dict[str, Array] = {}
    if correction == "aipo":
        loss, pg_metrics = losses.aipo(
            logp_bt, batch.rollout_logp, adv, mask, rho=off_policy.high, agg=agg, norm_len=norm_len
        )
    else:
        weights_bt = None
        if correction in PROXIMAL_CORRECTIONS:
            bounded = correction != "decoupled_ppo"
            weights_bt, w_metrics = losses.importance_weights(
                batch.old_logp,
                batch.rollout_logp,
                mask,
                level=off_policy.level if bounded else "token",
                mode="mask" if correction == "icepop" else "truncate",
                low=(off_policy.low or None) if bounded else None,
                high=off_policy.high if bounded else None,
            )
            metrics.update({f"off_policy/is_{k}": v for k, v in w_metrics.items()})
        loss, pg_metrics = losses.ppo_clip(
            logp_bt,
            batch.old_logp,
            adv,
            mask,
            clip_low=clip_low,
            clip_high=clip_high,
            agg=agg,
            norm_len=norm_len,
            is_weights_bt=weights_bt,
        )
    metrics.update(pg_metrics)
    if batch.rollout_logp is not None:
        diagnostics = behaviour_diagnostics(logp_bt, batch.rollout_logp, mask)
        metrics.update({f"off_policy/{k}": v for k, v in diagnostics.items()})
    return loss, metrics
