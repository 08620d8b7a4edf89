"""Importance ratios shared by the policy and off-policy losses: clamping, statistics, and the
clipped-weight policy gradient of CISPO and AIPO.

Ratios are `exp(logp - old_logp)` with the log-ratio clamped to [-20, 20] first (verl's
convention: exp(20) stays finite in float32; the gradient is zero beyond the clamp).
"""

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks
from jaxrl_llm.losses.aggregation import aggregate, masked_mean

LOG_RATIO_CLAMP = 20.0

Metrics = dict[str, jax.Array]


def masked_min_max(x_bt: jax.Array, mask_bt: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Min and max of `x_bt` over valid entries; (1, 1) when there are none."""
    valid = mask_bt > 0
    lo = jnp.min(jnp.where(valid, x_bt, jnp.inf))
    hi = jnp.max(jnp.where(valid, x_bt, -jnp.inf))
    # No valid token: report a ratio of 1 ("no change") rather than +-inf.
    any_valid = valid.any()
    return jnp.where(any_valid, lo, 1.0), jnp.where(any_valid, hi, 1.0)


def ratio_metrics(log_ratio_bt: jax.Array, mask_bt: jax.Array) -> Metrics:
    """Statistics of the importance ratio `r = exp(log_ratio)` over the valid tokens.

    See "Approximating KL Divergence" (J. Schulman, 2020): tokens come from pi_old, so with
    `r = pi / pi_old`, KL(pi_old || pi) is estimated by k1 = -log r and k3 = (r - 1) - log r.

    Args:
      log_ratio_bt: [B, T] `logp - old_logp`.
      mask_bt: [B, T] mask, nonzero where a token counts.

    Returns:
      {"ratio_mean", "ratio_min", "ratio_max", "approx_kl" (k3, non-negative), "approx_kl_k1"
      (verl's `ppo_kl`)}, each [] and without gradient.
    """
    log_ratio_bt = jax.lax.stop_gradient(log_ratio_bt)
    ratio_bt = jnp.exp(log_ratio_bt)
    lo, hi = masked_min_max(ratio_bt, mask_bt)
    return {
        "ratio_mean": masked_mean(ratio_bt, mask_bt),
        "ratio_min": lo,
        "ratio_max": hi,
        "approx_kl": masked_mean(ratio_bt - 1.0 - log_ratio_bt, mask_bt),
        "approx_kl_k1": masked_mean(-log_ratio_bt, mask_bt),
    }


def prepare_pg_inputs(fn, logp_bt, old_logp_bt, adv_bt, mask_bt, is_weights_bt):
    """Shared checks and casts of the policy losses; [B] advantages are broadcast to [B, T]."""
    _checks.same_shape(fn, axes="[B, T]", logp_bt=logp_bt, old_logp_bt=old_logp_bt, mask_bt=mask_bt)
    adv_bt = _checks.per_token(fn, "adv_bt", adv_bt, logp_bt, "logp_bt")
    if is_weights_bt is not None:
        _checks.same_shape(fn, axes="[B, T]", logp_bt=logp_bt, is_weights_bt=is_weights_bt)
    logp_bt, old_logp_bt, adv_bt = _checks.floating(logp_bt, old_logp_bt, adv_bt)
    # Advantages, old log-probs and IS weights are data: no gradient flows into them.
    adv_bt = jax.lax.stop_gradient(adv_bt)
    old_logp_bt = jax.lax.stop_gradient(old_logp_bt)
    if is_weights_bt is not None:
        is_weights_bt = jax.lax.stop_gradient(_checks.floating(is_weights_bt)[0])
    return logp_bt, old_logp_bt, adv_bt, is_weights_bt


def clipped_weight_pg(
    fn: str,
    logp_bt: jax.Array,
    behaviour_logp_bt: jax.Array,
    adv_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    low: float | None,
    high: float | None,
    agg: str,
    norm_len: int | None,
    agg_count: jax.Array | None,
) -> tuple[jax.Array, Metrics]:
    """Policy gradient with a stop-gradient, clipped importance weight (CISPO, AIPO).

    See "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention" (2506.13585)
    eq. (4), and "LlamaRL: A Distributed Asynchronous Reinforcement Learning Framework for
    Efficient Large-scale LLM Training" (2505.24034):

        w_t  = sg(clip(exp(logp_t - behaviour_logp_t), low, high))     (None: no bound)
        l_t  = -w_t A_t logp_t
        loss = aggregate(l, mask, agg)

    Every token keeps a gradient `-w_t A_t grad logp_t`; no token is dropped by clipping.

    Args:
      fn: the public loss's name, for error messages.
      logp_bt: [B, T] current log-probs of the sampled tokens.
      behaviour_logp_bt: [B, T] log-probs under the policy the ratio is taken against.
      adv_bt: [B, T] or [B] advantages.
      mask_bt: [B, T] mask.
      low: lower bound of the weight, or None.
      high: upper bound of the weight, or None.
      agg: aggregation mode.
      norm_len: constant divisor for "seq-mean-token-sum-norm".
      agg_count: full-batch denominator for micro-batching.

    Returns:
      `(loss, metrics)` with "clipfrac_high" (w clipped at high), "clipfrac_low" and
      `ratio_metrics`.
    """
    logp_bt, behaviour_logp_bt, adv_bt, _ = prepare_pg_inputs(
        fn, logp_bt, behaviour_logp_bt, adv_bt, mask_bt, None
    )
    log_ratio_bt = jnp.clip(
        jax.lax.stop_gradient(logp_bt) - behaviour_logp_bt, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP
    )
    ratio_bt = jnp.exp(log_ratio_bt)
    weight_bt = jnp.clip(ratio_bt, low, high)
    loss_bt = -weight_bt * adv_bt * logp_bt
    loss = aggregate(loss_bt, mask_bt, mode=agg, norm_len=norm_len, count=agg_count)
    too_high = ratio_bt > high if high is not None else jnp.zeros_like(mask_bt, bool)
    too_low = ratio_bt < low if low is not None else jnp.zeros_like(mask_bt, bool)
    metrics = {
        "clipfrac_high": masked_mean(too_high, mask_bt),
        "clipfrac_low": masked_mean(too_low, mask_bt),
        **ratio_metrics(log_ratio_bt, mask_bt),
    }
    return loss, jax.lax.stop_gradient(metrics)
