"""Splash attention (Pallas, Mosaic TPU) for the train step's causal self-attention.

JAX's block-sparse flash attention (`jax.experimental.pallas.ops.tpu.splash_attention`): the
[T, T] scores never reach HBM and blocks above the diagonal (or outside a sliding window) are
skipped, about half the score FLOPs of the XLA path, which computes the full masked square. See
"FlashAttention" (Dao et al., arXiv:2205.14135) for the online softmax it tiles.

Grouped-query attention runs as one multi-query kernel per KV head: the G = N / K query heads
of a group share it, vmapped over batch and KV heads. Packed rows pass their segment ids (a
token attends to earlier tokens of its own segment); a sliding window of W keeps keys at
positions p - W < s <= p (`LocalMask` with a left size of W - 1). Masks are by index, which
equals the model's position mask when positions count 0, 1, ... within each row or segment
(the train step's rows, unpacked or packed): the caller checks that.

Block sizes must divide T; T must be a multiple of 128 (the TPU lane width).
"""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash

__all__ = ["causal_attention", "supported", "TRACE_COUNTS"]

LANES = 128
# Times `causal_attention` was traced: tests assert it moves, so a silent fallback to the XLA
# path cannot pass for the kernel.
TRACE_COUNTS: collections.Counter[str] = collections.Counter()


def supported(length: int) -> bool:
    """Whether a sequence of `length` tokens fits the kernel's tiling."""
    return length >= LANES and length % LANES == 0


def _block(length: int, block: int) -> int:
    """The largest multiple of 128 <= `block` that divides `length`."""
    size = min(block, length) // LANES * LANES
    while length % size:
        size -= LANES
    return size


@functools.lru_cache(maxsize=64)
def _kernel(length: int, group: int, window: int | None, block: int, interpret: bool):
    shape = (length, length)
    if window is None:
        mask = splash.CausalMask(shape)
    else:
        mask = splash.LocalMask(shape, window_size=(window - 1, 0), offset=0)
    b = _block(length, block)
    sizes = splash.BlockSizes(
        block_q=b, block_kv=b, block_kv_compute=b,
        block_q_dkv=b, block_kv_dkv=b, block_kv_dkv_compute=b,
        block_q_dq=b, block_kv_dq=b,
    )  # fmt: skip
    return splash.make_splash_mqa(
        mask=splash.MultiHeadMask([mask] * group),
        block_sizes=sizes,
        head_shards=1,
        q_seq_shards=1,
        interpret=interpret,
    )


def causal_attention(
    q_btnh: jax.Array,
    k_btkh: jax.Array,
    v_btkh: jax.Array,
    segment_ids_bt: jax.Array | None = None,
    *,
    scale: float,
    window: int | None = None,
    block: int = 512,
    interpret: bool = False,
) -> jax.Array:
    """Causal grouped-query self-attention of one sequence per row.

    Args:
      q_btnh: queries [B, T, N, H].
      k_btkh, v_btkh: keys and values [B, T, K, H], K dividing N.
      segment_ids_bt: int32 [B, T] for packed rows (None: one sequence per row).
      scale: multiplies the scores (1 / sqrt(H), or a model's own query scale).
      window: a sliding window W (None: every earlier key).
      block: query / key block size (clamped to a multiple of 128 dividing T).
      interpret: run the kernel bodies in Pallas' interpreter (CPU tests).

    Returns:
      [B, T, N, H] in the dtype of `q_btnh`.

    Raises:
      ValueError: T is not a multiple of 128.
    """
    b, t, n, h = q_btnh.shape
    k = k_btkh.shape[2]
    if not supported(t):
        raise ValueError(f"splash attention needs T % {LANES} == 0 (and T >= {LANES}); T={t}.")
    TRACE_COUNTS["splash"] += 1
    kernel = _kernel(t, n // k, window, block, interpret)
    q_bkgth = (q_btnh * jnp.asarray(scale, q_btnh.dtype)).reshape(b, t, k, n // k, h)
    q_bkgth = q_bkgth.transpose(0, 2, 3, 1, 4)
    k_bkth, v_bkth = k_btkh.transpose(0, 2, 1, 3), v_btkh.transpose(0, 2, 1, 3)

    def one_row(q_kgth, k_kth, v_kth, seg_t):
        segments = None if seg_t is None else splash.SegmentIds(q=seg_t, kv=seg_t)
        per_head = lambda q, kk, v: kernel(q, kk, v, segment_ids=segments)
        return jax.vmap(per_head)(q_kgth, k_kth, v_kth)

    out_bkgth = jax.vmap(one_row)(q_bkgth, k_bkth, v_bkth, segment_ids_bt)
    return out_bkgth.transpose(0, 3, 1, 2, 4).reshape(b, t, n, h).astype(q_btnh.dtype)
