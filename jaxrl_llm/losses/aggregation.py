"""Masked aggregation of a per-token loss into a scalar, and its sums-and-counts form.

Every aggregation mode is a ratio `total / count` of two sums over the batch, so a batch split
into micro-batches (gradient accumulation) or across hosts gives exactly the full-batch value when
the parts' totals and counts are added before the division:

    full = sum_m total_m / sum_m count_m

The count depends on the mask only, never on parameters. Compute it once over the whole batch
(`aggregate_count`, then `jax.lax.psum` across hosts) and pass it as `count=` to every micro-batch:
the micro-batch losses and their gradients then add up to the full-batch loss and gradient.

Glossary: B sequences, T tokens per (padded) sequence; a mask marks the tokens that count.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_llm.losses import _checks

AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


class AggSums(NamedTuple):
    """Numerator and denominator of an aggregated loss: `loss = total / max(count, 1)`.

    Attributes:
      total: [] the numerator, a sum over the batch.
      count: [] the denominator: valid tokens for "token-mean", non-empty sequences otherwise.
    """

    total: jax.Array
    count: jax.Array


def _valid_and_counts(mask_bt: jax.Array) -> tuple[jax.Array, jax.Array]:
    valid_bt = jnp.asarray(mask_bt) > 0
    tokens_b = valid_bt.sum(axis=-1)
    return valid_bt, tokens_b


def aggregate_count(mask_bt: jax.Array, *, mode: str) -> jax.Array:
    """The denominator of `mode` for a batch: it depends on the mask only.

    See "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (2503.14476): a
    token-level mean must divide by the token count of the whole batch, not of each part.

        count = sum_bt [m_bt > 0]            ("token-mean")
        count = sum_b [sum_t m_bt > 0]       ("seq-mean-*")

    Sum it over micro-batches and hosts and pass it to `aggregate(..., count=...)` so that the
    parts add up to the full-batch loss. See `aggregate` for the modes.

    Args:
      mask_bt: [B, T] mask, nonzero where a token counts.
      mode: one of `AGG_MODES`.

    Returns:
      [] float32 count: valid tokens for "token-mean", sequences with at least one valid token
      for the "seq-mean-*" modes.

    Example:
      >>> aggregate_count(jnp.array([[1, 1, 0], [0, 0, 0]]), mode="seq-mean-token-sum")
      Array(1., dtype=float32)
    """
    _checks.choice("aggregate_count", "mode", mode, AGG_MODES)
    _checks.same_shape("aggregate_count", axes="[B, T]", mask_bt=mask_bt)
    _, tokens_b = _valid_and_counts(mask_bt)
    if mode == "token-mean":
        return tokens_b.sum().astype(jnp.float32)
    return (tokens_b > 0).sum().astype(jnp.float32)


def aggregate_sums(
    loss_bt: jax.Array, mask_bt: jax.Array, *, mode: str, norm_len: int | None = None
) -> AggSums:
    """Aggregates a per-token loss into `(total, count)`; `aggregate` is `total / count`.

    See "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (2503.14476) and
    "Understanding R1-Zero-Like Training: A Critical Perspective" (2503.20783) for the modes.
    With `x = loss_bt`, `m = mask_bt`, `n_b = sum_t m_bt` and `S` the non-empty sequences:

      token-mean:               total = sum_bt m x,                  count = sum_b n_b
      seq-mean-token-sum:       total = sum_b sum_t m x,             count = |S|
      seq-mean-token-mean:      total = sum_b (sum_t m x) / n_b,     count = |S|
      seq-mean-token-sum-norm:  total = sum_b (sum_t m x) / norm_len, count = |S|

    Args:
      loss_bt: [B, T] per-token loss. Masked entries are ignored (even NaN or inf).
      mask_bt: [B, T] mask, nonzero where a token counts.
      mode: one of `AGG_MODES`.
      norm_len: the constant divisor of "seq-mean-token-sum-norm" (Dr. GRPO's MAX_TOKENS);
        defaults to T. Pass the configured maximum response length when micro-batches are
        padded to different T. Only valid with that mode.

    Returns:
      `AggSums(total, count)` of [] arrays.

    Raises:
      ValueError: unknown `mode`, or `norm_len` given with another mode.
      AssertionError: `loss_bt` and `mask_bt` are not both [B, T] of one shape.
    """
    _checks.choice("aggregate", "mode", mode, AGG_MODES)
    _checks.same_shape("aggregate", axes="[B, T]", loss_bt=loss_bt, mask_bt=mask_bt)
    if norm_len is not None and mode != "seq-mean-token-sum-norm":
        raise ValueError(
            f"aggregate: norm_len={norm_len} is only used by mode='seq-mean-token-sum-norm', "
            f"got mode={mode!r}"
        )
    (loss_bt,) = _checks.floating(loss_bt)
    valid_bt, tokens_b = _valid_and_counts(mask_bt)
    # `where`, not a product: a NaN or inf in a padded position must not leak into the sum.
    seq_sum_b = jnp.where(valid_bt, loss_bt, 0.0).sum(axis=-1)
    dtype = loss_bt.dtype
    if mode == "token-mean":
        return AggSums(seq_sum_b.sum(), tokens_b.sum().astype(dtype))
    count = (tokens_b > 0).sum().astype(dtype)
    if mode == "seq-mean-token-sum":
        total = seq_sum_b.sum()
    elif mode == "seq-mean-token-mean":
        # Empty sequences have a zero sum; dividing by 1 keeps them at zero, and they are not counted.
        total = (seq_sum_b / jnp.maximum(tokens_b, 1).astype(dtype)).sum()
    else:  # "seq-mean-token-sum-norm"
        norm = loss_bt.shape[-1] if norm_len is None else norm_len
        total = seq_sum_b.sum() / norm
    return AggSums(total, count)


def aggregate(
    loss_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    mode: str,
    norm_len: int | None = None,
    count: jax.Array | float | None = None,
) -> jax.Array:
    """Aggregates a per-token loss into a scalar under a named mode.

    See "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (2503.14476) for
    token-level means, and "Understanding R1-Zero-Like Training: A Critical Perspective"
    (2503.20783) for the length bias of per-sequence means and the constant-length fix.

        loss = total / max(count, 1)        (totals and counts as in `aggregate_sums`)

    Modes and the peers that use them:
      - "token-mean": every valid token weighs the same (DAPO; verl's default; TRL "dapo").
      - "seq-mean-token-sum": sum over tokens, mean over sequences.
      - "seq-mean-token-mean": mean over tokens, then over sequences (the GRPO paper; TRL "grpo";
        verl uses it for GSPO).
      - "seq-mean-token-sum-norm": sum over tokens divided by the constant `norm_len`, mean over
        sequences (Dr. GRPO; TRL "dr_grpo" divides by B * max_completion_length, as here). verl
        divides the batch sum by T only, i.e. B times our value.
    The "seq-mean-*" modes average over sequences with at least one valid token, so all-padding
    rows added to fill a batch do not dilute the loss (recent verl does the same). A batch with
    no valid token gives 0.

    Args:
      loss_bt: [B, T] per-token loss; masked entries are ignored.
      mask_bt: [B, T] mask, nonzero where a token counts.
      mode: one of `AGG_MODES`.
      norm_len: constant divisor of "seq-mean-token-sum-norm"; defaults to T.
      count: the denominator to use instead of this batch's own; pass the full batch's
        `aggregate_count` (summed over micro-batches and hosts) so that micro-batch losses and
        gradients add up exactly to the full-batch ones.

    Returns:
      [] the aggregated loss.

    Example:
      >>> loss_bt = jnp.array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
      >>> mask_bt = jnp.array([[1, 1, 1], [1, 0, 0]])
      >>> aggregate(loss_bt, mask_bt, mode="token-mean")  # (1 + 2 + 3 + 4) / 4
      Array(2.5, dtype=float32)
    """
    sums = aggregate_sums(loss_bt, mask_bt, mode=mode, norm_len=norm_len)
    denom = sums.count if count is None else jnp.asarray(count, sums.total.dtype)
    return sums.total / jnp.maximum(denom, 1.0)


def masked_mean(
    x: jax.Array, mask: jax.Array, axis: int | tuple[int, ...] | None = None
) -> jax.Array:
    """Mean of `x` over the entries where `mask` is nonzero; 0 where there are none.

    This is "token-mean" for any rank, used for metrics such as clip fractions. See "DAPO: An
    Open-Source LLM Reinforcement Learning System at Scale" (2503.14476) for token-level means.

        masked_mean(x, m) = sum(m x) / max(sum(m), 1)

    Args:
      x: array of any shape.
      mask: array of the shape of `x`.
      axis: axes to reduce; all by default.

    Returns:
      The masked mean, with `axis` reduced.
    """
    _checks.same_shape("masked_mean", x=x, mask=mask)
    (x,) = _checks.floating(x)
    valid = jnp.asarray(mask) > 0
    total = jnp.where(valid, x, 0.0).sum(axis=axis)
    return total / jnp.maximum(valid.sum(axis=axis), 1).astype(x.dtype)
