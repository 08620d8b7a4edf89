"""Blocked token log-probs in plain jnp: the CPU path, and the blocking the Pallas kernels follow.

The vocabulary is walked in blocks of ``block_v`` columns (rows in blocks of ``block_t``) and
only one ``[block_t, block_v]`` float32 logit tile exists at a time; ``[N, V]`` never does.

Forward, per row, with ``z = h @ W[:, block] / temperature`` (online log-sum-exp, as in
"Online normalizer calculation for softmax", arXiv:1805.02867), carrying four ``[rows, 1]``
float32 statistics relative to the running maximum ``m``::

    s  = sum_v exp(z_v - m)                   (softmax normaliser)
    b  = sum_v exp(z_v - m) * (z_v - m)       (entropy numerator)
    zt = z_y                                  (target logit, y = target)
    on a new maximum m' the old sums rescale by a = exp(m - m'):  s' = a s,  b' = a (b + (m - m') s)

    lse = m + log s,   logp = zt - lse,   entropy = log s - b / s   (= lse - E_p[z])

Backward (recomputing each tile), with ``p = exp(z - lse)`` and cotangents ``g_logp``, ``g_ent``::

    d logp / dz    = onehot(y) - p
    d entropy / dz = -p * (z - E_p[z]),   E_p[z] = lse - entropy
    dlogits = (g_logp * (onehot - p) - g_ent * p * (z - E_p[z])) / temperature
    dh += dlogits @ W[:, block]^T,   dW[:, block] += h^T @ dlogits

That is four matmuls for forward + backward against three for the naive path (the tile's
logits are computed twice), and every temporary is a tile.

Ragged edges: the last vocabulary block is read at a clamped start ``V - block_v`` (so ``W`` is
never padded or copied) and columns already seen by the previous block are masked; rows are
zero-padded to a multiple of ``block_t`` (a copy of ``[N, D]``, small next to ``[D, V]``).

The helpers ``init_stats``, ``update_stats``, ``finalize_stats``, ``merge_stats`` and
``logit_grads`` are shared with the Pallas kernel bodies, so the math lives in one place.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from kernels.logprobs.config import BlockConfig

__all__ = [
    "RunningStats",
    "init_stats",
    "update_stats",
    "finalize_stats",
    "merge_stats",
    "logit_grads",
    "forward",
    "backward",
]

# Start of the running maximum. Finite on purpose: with -inf, the first rescale computes
# (m - m') * s = (-inf) * 0 = NaN. Logits below -1e30 are not supported (float32 logits of a
# real model are within +-1e4).
NEG_INIT = -1e30


class RunningStats(NamedTuple):
    """Online log-sum-exp state of a block of rows; every field is float32 ``[rows, 1]``."""

    m: jax.Array  # running maximum of z
    s: jax.Array  # sum exp(z - m)
    b: jax.Array  # sum exp(z - m) * (z - m); zero when entropy is not requested
    zt: jax.Array  # target logit (0 until the target's block is seen)


def init_stats(rows: int) -> RunningStats:
    """Statistics of no columns at all, for ``rows`` rows."""
    zeros = jnp.zeros((rows, 1), jnp.float32)
    return RunningStats(jnp.full((rows, 1), NEG_INIT, jnp.float32), zeros, zeros, zeros)


def update_stats(
    stats: RunningStats,
    z: jax.Array,
    cols: jax.Array,
    valid: jax.Array | None,
    targets: jax.Array,
    *,
    with_entropy: bool,
) -> RunningStats:
    """Folds one tile of tempered logits into the running statistics.

    Args:
      stats: the statistics so far, ``[rows, 1]`` each.
      z: float32 tempered logits of this tile, ``[rows, block_v]``; arbitrary (even NaN) where
        ``valid`` is False.
      cols: int32 global vocabulary ids of the tile's columns, broadcastable to ``z``.
      valid: bool, broadcastable to ``z``: which columns count (None: all).
      targets: int32 ``[rows, 1]``.
      with_entropy: whether to update ``b``.

    Returns:
      The updated statistics.
    """
    m, s, b, zt = stats
    hit = cols == targets
    if valid is not None:
        z = jnp.where(valid, z, -jnp.inf)
        hit = jnp.logical_and(hit, valid)
    m_new = jnp.maximum(m, jnp.max(z, axis=1, keepdims=True))
    alpha = jnp.exp(m - m_new)
    e = jnp.exp(z - m_new)  # exactly 0 on masked columns
    s_new = alpha * s + jnp.sum(e, axis=1, keepdims=True)
    if with_entropy:
        ez = e * (z - m_new)
        if valid is not None:
            ez = jnp.where(valid, ez, 0.0)  # 0 * (-inf) would be NaN
        b = alpha * (b + (m - m_new) * s) + jnp.sum(ez, axis=1, keepdims=True)
    zt = zt + jnp.sum(jnp.where(hit, z, 0.0), axis=1, keepdims=True)
    return RunningStats(m_new, s_new, b, zt)


def finalize_stats(stats: RunningStats) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Returns ``(logp, entropy, lse)``, float32, shaped like the statistics."""
    log_s = jnp.log(stats.s)
    lse = stats.m + log_s
    return stats.zt - lse, log_s - stats.b / stats.s, lse


def merge_stats(stats: RunningStats, axis: int = 0) -> RunningStats:
    """Merges statistics computed over disjoint vocabulary ranges, stacked along ``axis``."""
    m = jnp.max(stats.m, axis=axis, keepdims=True)
    alpha = jnp.exp(stats.m - m)
    s = jnp.sum(alpha * stats.s, axis=axis)
    b = jnp.sum(alpha * (stats.b + (stats.m - m) * stats.s), axis=axis)
    return RunningStats(jnp.squeeze(m, axis), s, b, jnp.sum(stats.zt, axis=axis))


def logit_grads(
    z: jax.Array,
    cols: jax.Array,
    valid: jax.Array | None,
    targets: jax.Array,
    lse: jax.Array,
    entropy: jax.Array,
    g_logp: jax.Array,
    g_ent: jax.Array | None,
    *,
    inv_temp: float,
    g_p: jax.Array | None = None,
) -> jax.Array:
    """Cotangent of one tile of *untempered* logits ``h @ W``, float32 ``[rows, block_v]``.

    Args:
      z: float32 tempered logits of the tile (arbitrary where ``valid`` is False).
      cols: int32 global column ids, broadcastable to ``z``.
      valid: bool mask of real columns/rows, broadcastable to ``z`` (None: all); the result is
        exactly 0 where it is False.
      targets, lse, entropy, g_logp: ``[rows, 1]``: targets, forward residuals, cotangent of logp.
      g_ent: ``[rows, 1]`` cotangent of the entropy, or None when entropy was not requested.
      inv_temp: ``1 / temperature`` (the chain rule through ``z = logits / temperature``).
      g_p: ``[rows, 1]`` weight of ``-p`` when the log-sum-exp has a cotangent of its own
        (``g_logp - g_lse``, since ``d lse / dz = p``); None: ``g_logp``.
    """
    p = jnp.exp(z - lse)
    g_p = g_logp if g_p is None else g_p
    dz = g_logp * (cols == targets).astype(jnp.float32) - g_p * p
    if g_ent is not None:
        mean_z = lse - entropy  # E_p[z]
        dz = dz - g_ent * p * (z - mean_z)
    dz = dz * inv_temp
    if valid is not None:
        dz = jnp.where(valid, dz, 0.0)
    return dz


def _dot(a: jax.Array, b: jax.Array, contract: tuple[int, int]) -> jax.Array:
    """``a`` contracted with ``b`` on (a_dim, b_dim), float32 accumulation."""
    return jax.lax.dot_general(
        a, b, ((contract[:1], contract[1:]), ((), ())), preferred_element_type=jnp.float32
    )


def _pad_rows(x: jax.Array, rows: int) -> jax.Array:
    pad = rows - x.shape[0]
    return x if pad == 0 else jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))


def _vocab_block(w_dv: jax.Array, j: jax.Array, block_v: int):
    """Columns of vocabulary block ``j``: (W tile, global column ids [1, bv], valid [1, bv])."""
    vocab = w_dv.shape[1]
    start = j * block_v
    read_at = jnp.minimum(start, vocab - block_v)  # clamped: W is never padded
    w_blk = jax.lax.dynamic_slice_in_dim(w_dv, read_at, block_v, axis=1)
    cols = read_at + jax.lax.broadcasted_iota(jnp.int32, (1, block_v), 1)
    return w_blk, cols, cols >= start, read_at


def forward(
    h_nd: jax.Array,
    w_dv: jax.Array,
    targets_n: jax.Array,
    *,
    inv_temp: float,
    config: BlockConfig,
    with_entropy: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Blocked forward pass.

    Args:
      h_nd: hidden states ``[N, D]``; w_dv: unembedding ``[D, V]`` (same dtype).
      targets_n: int32 ``[N]``.
      inv_temp: ``1 / temperature``.
      config: fitted blocks (``BlockConfig.fit("xla", ...)``).
      with_entropy: whether to compute the entropy (else the returned entropy is meaningless).

    Returns:
      ``(logp_n, entropy_n, lse_n)``, float32.
    """
    n, _ = h_nd.shape
    bt, bv = config.block_t, config.block_v
    nt, nv = -(-n // bt), -(-w_dv.shape[1] // bv)
    h_tbd = _pad_rows(h_nd, nt * bt).reshape(nt, bt, -1)
    t_tb1 = _pad_rows(targets_n, nt * bt).reshape(nt, bt, 1)

    def row_block(args):
        h_bd, t_b1 = args

        def v_step(stats, j):
            w_blk, cols, valid, _ = _vocab_block(w_dv, j, bv)
            z = _dot(h_bd, w_blk, (1, 0)) * inv_temp
            return update_stats(stats, z, cols, valid, t_b1, with_entropy=with_entropy), None

        stats, _ = jax.lax.scan(v_step, init_stats(bt), jnp.arange(nv))
        return finalize_stats(stats)

    outs = jax.lax.map(row_block, (h_tbd, t_tb1))
    return tuple(o.reshape(-1)[:n] for o in outs)


def backward(
    h_nd: jax.Array,
    w_dv: jax.Array,
    targets_n: jax.Array,
    lse_n: jax.Array,
    entropy_n: jax.Array,
    g_logp_n: jax.Array,
    g_ent_n: jax.Array | None,
    *,
    inv_temp: float,
    config: BlockConfig,
    g_lse_n: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Blocked backward pass: recomputes each logit tile, never builds ``[N, V]``.

    Args:
      h_nd, w_dv, targets_n: the forward inputs.
      lse_n, entropy_n: float32 ``[N]`` forward residuals.
      g_logp_n: float32 ``[N]`` cotangent of the log-probs.
      g_ent_n: float32 ``[N]`` cotangent of the entropy, or None.
      inv_temp, config: as in :func:`forward`.
      g_lse_n: float32 ``[N]`` cotangent of the log-sum-exp, or None.

    Returns:
      ``(dh_nd, dw_dv)`` in the dtypes of ``h_nd`` and ``w_dv``.
    """
    n, d = h_nd.shape
    vocab = w_dv.shape[1]
    bt, bv = config.block_t, config.block_v
    nt, nv = -(-n // bt), -(-vocab // bv)

    def rows(x):  # [N] -> [nt, bt, 1]; padded rows get zero cotangents, hence zero gradients
        return _pad_rows(x, nt * bt).reshape(nt, bt, 1)

    per_row = (
        _pad_rows(h_nd, nt * bt).reshape(nt, bt, d),
        rows(targets_n),
        rows(lse_n),
        rows(entropy_n),
        rows(g_logp_n),
        None if g_ent_n is None else rows(g_ent_n),
        None if g_lse_n is None else rows(g_logp_n - g_lse_n),
    )

    def row_block(dw_acc, args):
        h_bd, t_b1, lse_b1, ent_b1, gl_b1, ge_b1, gp_b1 = args

        def v_step(carry, j):
            dh_bd, dw_acc = carry
            w_blk, cols, valid, read_at = _vocab_block(w_dv, j, bv)
            z = _dot(h_bd, w_blk, (1, 0)) * inv_temp
            dz = logit_grads(
                z, cols, valid, t_b1, lse_b1, ent_b1, gl_b1, ge_b1, inv_temp=inv_temp, g_p=gp_b1
            ).astype(w_dv.dtype)
            dh_bd = dh_bd + _dot(dz, w_blk, (1, 1))
            dw_blk = jax.lax.dynamic_slice_in_dim(dw_acc, read_at, bv, axis=1)
            dw_acc = jax.lax.dynamic_update_slice_in_dim(
                dw_acc, dw_blk + _dot(h_bd, dz, (0, 0)), read_at, axis=1
            )
            return (dh_bd, dw_acc), None

        (dh_bd, dw_acc), _ = jax.lax.scan(
            v_step, (jnp.zeros((bt, d), jnp.float32), dw_acc), jnp.arange(nv)
        )
        return dw_acc, dh_bd.astype(h_nd.dtype)

    dw_acc, dh_tbd = jax.lax.scan(row_block, jnp.zeros((d, vocab), jnp.float32), per_row)
    return dh_tbd.reshape(nt * bt, d)[:n], dw_acc.astype(w_dv.dtype)
