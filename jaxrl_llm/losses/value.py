"""The PPO critic loss: squared error to the returns, with the value clipped around the old value."""

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks
from jaxrl_llm.losses.aggregation import aggregate, masked_mean


def value_loss(
    values_bt: jax.Array,
    old_values_bt: jax.Array,
    returns_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    clip: float | None,
    agg: str = "token-mean",
    norm_len: int | None = None,
    agg_count: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clipped value loss of PPO.

    See "Proximal Policy Optimization Algorithms" (1707.06347) and "The N+ Implementation Details
    of RLHF with PPO: A Case Study on TL;DR Summarization" (2403.17031), detail on value clipping:

        v_clip = old_v + clip(v - old_v, -clip, clip)
        l_t    = 0.5 * max((v - R)^2, (v_clip - R)^2)        (0.5 * (v - R)^2 if clip is None)
        loss   = aggregate(l, mask, agg)

    The factor 0.5 and the max of the two squared errors match verl (`cliprange_value`), TRL
    (`cliprange_value`) and OpenRLHF (`value_clip`). `clip` has no default because the peers'
    defaults differ (verl 0.5, TRL 0.2).

    Args:
      values_bt: [B, T] current value predictions (the gradient flows into these).
      old_values_bt: [B, T] value predictions made at rollout time.
      returns_bt: [B, T] regression targets, e.g. the returns from `advantages.gae`.
      mask_bt: [B, T] mask, nonzero where a token counts.
      clip: half-width of the trust region around `old_values_bt`, or None for no clipping.
      agg: aggregation mode, see `aggregate`.
      norm_len: constant divisor for "seq-mean-token-sum-norm".
      agg_count: full-batch denominator for micro-batching, see `aggregate`.

    Returns:
      `(loss, metrics)`: [] loss; metrics has "clipfrac" (tokens where the clipped error is the
      larger), "values_mean", "returns_mean" and "explained_variance"
      `1 - Var(R - v) / Var(R)` over the valid tokens.

    Example:
      >>> loss, m = value_loss(values_bt, old_values_bt, returns_bt, mask_bt, clip=0.2)
    """
    fn = "value_loss"
    _checks.same_shape(
        fn,
        axes="[B, T]",
        values_bt=values_bt,
        old_values_bt=old_values_bt,
        returns_bt=returns_bt,
        mask_bt=mask_bt,
    )
    if clip is not None and clip < 0:
        raise ValueError(f"{fn}: clip={clip} must be >= 0 (or None)")
    values_bt, old_values_bt, returns_bt = _checks.floating(values_bt, old_values_bt, returns_bt)
    old_values_bt = jax.lax.stop_gradient(old_values_bt)
    returns_bt = jax.lax.stop_gradient(returns_bt)
    err_bt = jnp.square(values_bt - returns_bt)
    if clip is None:
        loss_bt = err_bt
        clipped_bt = jnp.zeros(err_bt.shape, bool)
    else:
        v_clip_bt = old_values_bt + jnp.clip(values_bt - old_values_bt, -clip, clip)
        err_clip_bt = jnp.square(v_clip_bt - returns_bt)
        loss_bt = jnp.maximum(err_bt, err_clip_bt)
        clipped_bt = err_clip_bt > err_bt
    loss = 0.5 * aggregate(loss_bt, mask_bt, mode=agg, norm_len=norm_len, count=agg_count)

    v_bt = jax.lax.stop_gradient(values_bt)
    resid_bt = returns_bt - v_bt
    var_r = masked_mean(jnp.square(returns_bt - masked_mean(returns_bt, mask_bt)), mask_bt)
    var_resid = masked_mean(jnp.square(resid_bt - masked_mean(resid_bt, mask_bt)), mask_bt)
    metrics = {
        "clipfrac": masked_mean(clipped_bt, mask_bt),
        "values_mean": masked_mean(v_bt, mask_bt),
        "returns_mean": masked_mean(returns_bt, mask_bt),
        # Undefined for constant returns: report 0 there instead of a division by zero.
        "explained_variance": jnp.where(
            var_r > 0, 1.0 - var_resid / jnp.where(var_r > 0, var_r, 1.0), 0.0
        ),
    }
    return loss, jax.lax.stop_gradient(metrics)
