"""JAX's Pallas TPU paged attention over the contiguous KV cache, viewed as pages for free.

`jax.experimental.pallas.ops.tpu.paged_attention` (the vLLM-style kernel JetStream serves
with; "Efficient Memory Management for Large Language Model Serving with PagedAttention",
arXiv:2309.06180) reads, for each row and KV head, only the pages that hold its first
``lengths`` slots, double-buffering page DMAs from HBM into VMEM, with an online softmax
("FlashAttention", arXiv:2205.14135). It wants keys and values as
``[K', pages, page, H]`` and a page table ``[B', pages_per_row]``.

Our cache is ``[B, K, S, H]`` per layer, one contiguous allocation (`rollout.kv_cache`). Read
as ``K' = 1`` KV head and ``B' = B * K`` rows, each row's S slots are ``S / page``
consecutive pages, so

    k_pages = k_bksh.reshape(1, B * K * S / page, page, H)     # a bitcast: no copy
    page_indices[b * K + k] = (b * K + k) * S / page + arange(S / page)

and the G = N / K query heads of a KV head are that row's "query heads"
(``q_bnh.reshape(B * K, G, H)``, also a bitcast). No transpose and no copy of the cache: the
view is checked in the compiled TPU program by `tests/kernels/test_decode_attention.py`.

The kernel applies no score scale: queries are scaled by ``1 / score_divisor`` first (as the
splash wrapper does). It computes with the pages in bfloat16 (its loader casts them), so a
float32 cache would be rounded on the way, and it lowers only for head_dim a multiple of 128:
`api.supported` says so. No sliding window: `api` runs local layers through the reference.
"""

from __future__ import annotations

import collections
import contextlib
import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

from kernels.decode_attention.config import BlockConfig

__all__ = ["paged_decode_attention", "TRACE_COUNTS"]

# Times the kernel was traced: tests assert it moves, so a fallback cannot pass for the kernel.
TRACE_COUNTS: collections.Counter[str] = collections.Counter()


def paged_decode_attention(
    q_bnh: jax.Array,
    k_bksh: jax.Array,
    v_bksh: jax.Array,
    lengths_b: jax.Array,
    *,
    score_divisor: float,
    config: BlockConfig,
    interpret=False,
) -> jax.Array:
    """Decode attention reading only each row's filled pages.

    Args:
      q_bnh: queries [B, N, H].
      k_bksh, v_bksh: the cache [B, K, S, H], S a multiple of `config.block_slots`.
      lengths_b: int32 [B], filled slots (1..S) of each row.
      score_divisor: scores are divided by it.
      config: the page size (`block_slots`).
      interpret: True or a `pltpu.InterpretParams`: run in Pallas' TPU interpreter (CPU tests).

    Returns:
      [B, N, H] in the dtype of `q_bnh`.
    """
    b, n, h = q_bnh.shape
    kv_heads, slots = k_bksh.shape[1], k_bksh.shape[2]
    page = config.block_slots
    if slots % page:
        raise ValueError(f"cache slots={slots} must be a multiple of block_slots={page}")
    TRACE_COUNTS["paged"] += 1
    rows, pages_per_row = b * kv_heads, slots // page
    # Scaled in float32 (the kernel reads queries as float32 when G % 8 != 0; a bfloat16
    # scale such as 1 / sqrt(128) would be rounded).
    q_rgh = (q_bnh.astype(jnp.float32) * (1.0 / score_divisor)).reshape(rows, -1, h)
    k_pages = k_bksh.reshape(1, rows * pages_per_row, page, h)
    v_pages = v_bksh.reshape(1, rows * pages_per_row, page, h)
    page_indices = jnp.arange(rows * pages_per_row, dtype=jnp.int32).reshape(rows, pages_per_row)
    lengths_r = jnp.repeat(jnp.minimum(lengths_b, slots).astype(jnp.int32), kv_heads)
    call = functools.partial(
        paged_attention, q_rgh, k_pages, v_pages, lengths_r, page_indices,
        pages_per_compute_block=1,
    )  # fmt: skip
    # Its dots multiply float32 queries by bfloat16 pages: Mosaic refuses that at float32
    # contraction precision ("Bad rhs type"), so they run at DEFAULT whatever the process asks.
    with contextlib.ExitStack() as scope:
        scope.enter_context(jax.default_matmul_precision("default"))
        if interpret:
            params = pltpu.InterpretParams() if interpret is True else interpret
            scope.enter_context(pltpu.force_tpu_interpret_mode(params))
        out = call()
    return out.reshape(b, n, h).astype(q_bnh.dtype)
