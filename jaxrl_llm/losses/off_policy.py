"""Off-policy correction: importance weights between the trainer's and the rollout engine's
log-probs (TIS, IcePop, sequence masking), and LlamaRL's AIPO policy-gradient loss.

Two kinds of mismatch make rollouts off-policy: the rollout engine's numerics differ from the
trainer's (same weights, different kernels), and asynchronous training samples with stale
weights. Both are corrected with the ratio `pi_old / pi_rollout` of the trainer's log-probs to
the log-probs the rollout engine reported for the same tokens.
"""

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks
from jaxrl_llm.losses.aggregation import masked_mean
from jaxrl_llm.losses.ratios import LOG_RATIO_CLAMP, Metrics, clipped_weight_pg

IS_LEVELS = ("token", "sequence")
IS_MODES = ("truncate", "mask")


def importance_weights(
    old_logp_bt: jax.Array,
    rollout_logp_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    level: str = "token",
    mode: str = "truncate",
    low: float | None = None,
    high: float | None = 2.0,
) -> tuple[jax.Array, Metrics]:
    """Importance weights that correct for the rollout/trainer mismatch, truncated or masked.

    See "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training" (F. Yao et al.,
    2025 blog; truncated IS, TIS) and "Every Step Evolves: Scaling Reinforcement Learning for
    Trillion-Scale Thinking Model" (2510.18855; IcePop masking); the sequence level is verl's
    rollout-correction form. With `d_t = old_logp_t - rollout_logp_t` (clamped to [-20, 20]):

        level="token":     rho_t = exp(d_t)
        level="sequence":  rho_t = exp(sum_t' m_t' d_t')      (one weight per sequence)
        mode="truncate":   w_t = clip(rho_t, low, high)                       (TIS)
        mode="mask":       w_t = rho_t if low <= rho_t <= high else 0         (IcePop)

    `low=None` means no lower bound (0) in both modes; verl's default lower threshold is
    `1 / high`, pass it explicitly to match. `high=None` means no upper bound. Masked positions
    get weight 0. To drop tokens or sequences without reweighting, use `weights_bt > 0` as a mask.
    Multiply the weights into a per-token loss, e.g. `ppo_clip(..., is_weights_bt=w)`.

    Args:
      old_logp_bt: [B, T] trainer log-probs of the sampled tokens (the policy being corrected to).
      rollout_logp_bt: [B, T] log-probs the rollout engine reported for the same tokens.
      mask_bt: [B, T] mask, nonzero where a token counts.
      level: "token" or "sequence".
      mode: "truncate" or "mask".
      low: lower threshold, or None.
      high: upper threshold, or None.

    Returns:
      `(weights_bt, metrics)`: [B, T] weights without gradient, and {"ratio_mean" (raw rho over
      valid tokens), "weight_mean", "clipped_frac" (valid tokens truncated or masked)}.

    Example:
      >>> w_bt, m = importance_weights(old_logp_bt, rollout_logp_bt, mask_bt, high=2.0)
    """
    fn = "importance_weights"
    _checks.choice(fn, "level", level, IS_LEVELS)
    _checks.choice(fn, "mode", mode, IS_MODES)
    if low is not None and high is not None and not low < high:
        raise ValueError(f"{fn}: low={low} must be < high={high}")
    _checks.same_shape(
        fn, axes="[B, T]", old_logp_bt=old_logp_bt, rollout_logp_bt=rollout_logp_bt, mask_bt=mask_bt
    )
    old_logp_bt, rollout_logp_bt = _checks.floating(
        jax.lax.stop_gradient(old_logp_bt), jax.lax.stop_gradient(rollout_logp_bt)
    )
    valid_bt = mask_bt > 0
    d_bt = jnp.where(valid_bt, old_logp_bt - rollout_logp_bt, 0.0)
    if level == "sequence":
        d_bt = jnp.broadcast_to(d_bt.sum(-1, keepdims=True), d_bt.shape)
    rho_bt = jnp.exp(jnp.clip(d_bt, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    lo = 0.0 if low is None else low
    hi = jnp.inf if high is None else high
    outside_bt = (rho_bt < lo) | (rho_bt > hi)
    if mode == "truncate":
        w_bt = jnp.clip(rho_bt, lo, hi)
    else:
        w_bt = jnp.where(outside_bt, 0.0, rho_bt)
    w_bt = jnp.where(valid_bt, w_bt, 0.0)
    metrics = {
        "ratio_mean": masked_mean(rho_bt, mask_bt),
        "weight_mean": masked_mean(w_bt, mask_bt),
        "clipped_frac": masked_mean(outside_bt, mask_bt),
    }
    return w_bt, metrics


def aipo(
    logp_bt: jax.Array,
    rollout_logp_bt: jax.Array,
    adv_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    rho: float,
    agg: str = "token-mean",
    norm_len: int | None = None,
    agg_count: jax.Array | None = None,
) -> tuple[jax.Array, Metrics]:
    """AIPO: policy gradient with a one-sided clipped importance weight (LlamaRL).

    See "LlamaRL: A Distributed Asynchronous Reinforcement Learning Framework for Efficient
    Large-scale LLM Training" (2505.24034), Asynchronous Importance-weighted Policy Optimization:

        grad J = E_{y ~ mu} [ min(pi(y) / mu(y), rho) A(y) grad log pi(y) ]

    applied per token with mu the rollout (behaviour) policy:

        l_t  = -sg(min(exp(logp_t - rollout_logp_t), rho)) A_t logp_t
        loss = aggregate(l, mask, agg)

    The weight is capped above only; there is no PPO ratio clipping, so no token loses its
    gradient. `rho` has no default: pick it for your staleness (the cap bounds the variance).

    Args:
      logp_bt: [B, T] log-probs of the sampled tokens under the current policy.
      rollout_logp_bt: [B, T] log-probs under the rollout policy that sampled them.
      adv_bt: [B, T] per-token advantages, or [B] per-sequence advantages broadcast over T.
      mask_bt: [B, T] mask, nonzero where a token counts.
      rho: the cap on the importance weight (> 0).
      agg: aggregation mode, see `aggregate`.
      norm_len: constant divisor for "seq-mean-token-sum-norm".
      agg_count: full-batch denominator for micro-batching, see `aggregate`.

    Returns:
      `(loss, metrics)`: [] loss; metrics has "clipfrac_high" (weights capped at rho),
      "clipfrac_low" (always 0) and the ratio statistics of `ratio_metrics`.
    """
    if not rho > 0:
        raise ValueError(f"aipo: rho={rho} must be > 0")
    return clipped_weight_pg(
        "aipo",
        logp_bt,
        rollout_logp_bt,
        adv_bt,
        mask_bt,
        low=None,
        high=rho,
        agg=agg,
        norm_len=norm_len,
        agg_count=agg_count,
    )
