"""JAX's Pallas GPU decode attention (split-K, Triton lowering) with per-row lengths.

`jax.experimental.pallas.ops.gpu.decode_attention.gqa`: for every (row, KV head) it splits
the cache into chunks that run as separate programs ("Flash-Decoding", Dao et al. 2023), each
walking its chunk in `block_slots` blocks up to the row's length and skipping chunks past
it, then merges the chunks' partial softmaxes in XLA. Rows read only their filled blocks; a
sliding window skips the chunks wholly before it (``start_idx``).

It takes keys and values as [B, S, K, H] and transposes them to [B, K, S, H] itself; we hand it
``swapaxes(k_bksh, 1, 2)``, and XLA cancels the two transposes (no copy of the cache). The
query heads of a KV head are padded to the kernel's 16-row tile and masked. Queries are cast
to the cache's dtype (the kernel's dots take one dtype); the output comes back in the query's.

Triton lowering, as `kernels.logprobs.pallas_gpu` (why not Mosaic GPU yet: see there). Checked
in the generic Pallas interpreter on CPU; not yet compiled on a GPU here:
`experiments/benchmarks/decode_attention_gpu.py` compiles and times it against the XLA path.
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp

from kernels.decode_attention.config import BlockConfig

__all__ = ["split_k_decode_attention", "TRACE_COUNTS"]

TRACE_COUNTS: collections.Counter[str] = collections.Counter()


def split_k_decode_attention(
    q_bnh: jax.Array,
    k_bksh: jax.Array,
    v_bksh: jax.Array,
    lengths_b: jax.Array,
    *,
    window: jax.Array | int | None,
    score_divisor: float,
    config: BlockConfig,
    interpret: bool = False,
) -> jax.Array:
    """Decode attention reading only each row's filled blocks (and, with a window, the chunks
    that reach into it).

    Args:
      q_bnh: queries [B, N, H], H a power of 2 >= 16.
      k_bksh, v_bksh: the cache [B, K, S, H], S a multiple of `config.block_slots`.
      lengths_b: int32 [B], filled slots (1..S) of each row.
      window: int32 scalar sliding window W (slots >= lengths - W), or None.
      score_divisor: scores are divided by it.
      config: `block_slots` and `max_splits`.
      interpret: run the kernel body in the generic Pallas interpreter (CPU tests).

    Returns:
      [B, N, H] in the dtype of `q_bnh`.
    """
    from jax.experimental.pallas.ops.gpu import decode_attention as gpu_ops  # Triton: lazily

    slots = k_bksh.shape[2]
    if slots % config.block_slots:
        raise ValueError(
            f"cache slots={slots} must be a multiple of block_slots={config.block_slots}"
        )
    TRACE_COUNTS["split_k"] += 1
    lengths_b = jnp.minimum(lengths_b, slots).astype(jnp.int32)
    start_b = None if window is None else jnp.maximum(lengths_b - window, 0).astype(jnp.int32)
    out = gpu_ops.gqa(
        q_bnh.astype(k_bksh.dtype),
        jnp.swapaxes(k_bksh, 1, 2),
        jnp.swapaxes(v_bksh, 1, 2),
        start_b,
        lengths_b,
        sm_scale=1.0 / score_divisor,
        block_k=config.block_slots,
        k_splits=config.splits(slots),
        interpret=interpret,
    )
    return out.astype(q_bnh.dtype)
