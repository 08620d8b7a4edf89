"""Public entry point: one decode step's attention over the KV cache, backend picked per device.

Backends (`IMPLEMENTATIONS`):

- ``"xla"``: the masked full-cache attention (`reference.py`): reads every slot of the cache;
  the default on CPU and the path every other backend is tested against.
- ``"pallas_tpu"``: JAX's Pallas TPU paged attention over the cache viewed as pages
  (`pallas_tpu.py`); the default on TPU. Local (sliding-window) layers run the reference.
- ``"pallas_gpu"``: JAX's Pallas GPU split-K decode attention (`pallas_gpu.py`); the default on
  GPU.

Both kernels read, per row, only the blocks that hold its filled slots: a decode step costs
the rows' lengths, not the cache's. They need the cache's slot count to be a multiple of
`BlockConfig.block_slots` (`padded_slots`). ``interpret=True`` runs a kernel in Pallas'
interpreter on any device (how the tests check them on CPU).
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp

from kernels.decode_attention import pallas_gpu, pallas_tpu
from kernels.decode_attention.config import DEFAULT_BLOCKS, IMPLEMENTATIONS, BlockConfig
from kernels.decode_attention.reference import masked_decode_attention
from kernels.platforms import platform_backend as default_implementation

__all__ = ["decode_attention", "default_implementation", "supported"]


def supported(implementation: str, *, head_dim: int, cache_dtype) -> str:
    """Why `implementation` cannot serve a cache of this head width and dtype ("" if it can).

    ``pallas_gpu``: Triton tiles need a power-of-2 head width >= 16. ``pallas_tpu``: JAX's
    paged attention lowers only with head_dim a multiple of 128 (its per-head statistics take
    the query's block shape; at 64 Mosaic refuses the block: Llama-3.2-1B and SmolLM2 decode
    through "xla" on TPU), and it computes with bfloat16 pages, so a wider cache dtype would
    be rounded.

    Example:
      >>> supported("pallas_gpu", head_dim=80, cache_dtype="bfloat16")
      'pallas_gpu needs a power-of-2 head_dim >= 16; head_dim=80'
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"{implementation=} must be one of {IMPLEMENTATIONS}")
    if implementation == "pallas_gpu" and (head_dim < 16 or head_dim & (head_dim - 1)):
        return f"pallas_gpu needs a power-of-2 head_dim >= 16; {head_dim=}"
    if implementation == "pallas_tpu" and head_dim % 128:
        return f"pallas_tpu (JAX's paged attention) needs head_dim % 128 == 0; {head_dim=}"
    if implementation == "pallas_tpu" and jnp.dtype(cache_dtype).itemsize != 2:
        return (
            f"pallas_tpu computes with bfloat16 pages: a {jnp.dtype(cache_dtype).name} cache "
            "would be rounded"
        )
    return ""


def decode_attention(
    q_bnh: jax.Array,
    k_bksh: jax.Array,
    v_bksh: jax.Array,
    lengths_b: jax.Array,
    *,
    window: jax.Array | int | None = None,
    score_divisor: float | None = None,
    implementation: str = "xla",
    config: BlockConfig = DEFAULT_BLOCKS,
    interpret=False,
) -> jax.Array:
    """Attention of one query per row over the filled slots of its row of the cache.

    Args:
      q_bnh: queries [B, N, H].
      k_bksh, v_bksh: the cache [B, K, S, H], K dividing N (this step's keys already written).
      lengths_b: int32 [B], filled slots: slots 0..lengths_b - 1 are visible.
      window: int32 scalar, a local layer's sliding window W (slots >= lengths - W); None: none.
      score_divisor: scores are divided by it; None: sqrt(H).
      implementation: one of `IMPLEMENTATIONS`.
      config: the kernels' blocks; S must be a multiple of `config.block_slots` for them.
      interpret: run a Pallas kernel in Pallas' interpreter (True, or for ``pallas_tpu`` a
        `pltpu.InterpretParams`).

    Returns:
      [B, N, H] in the dtype of `q_bnh`.

    Raises:
      ValueError: an unknown implementation, or a cache length the kernel does not tile.

    Example:
      >>> out = decode_attention(q, k_cache, v_cache, positions + 1, implementation="pallas_gpu")
    """
    chex.assert_rank([q_bnh, k_bksh, v_bksh, lengths_b], [3, 4, 4, 1])
    chex.assert_equal_shape([k_bksh, v_bksh])
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"{implementation=} must be one of {IMPLEMENTATIONS}")
    divisor = score_divisor or math.sqrt(q_bnh.shape[-1])
    reference = lambda: masked_decode_attention(
        q_bnh, k_bksh, v_bksh, lengths_b, window=window, score_divisor=divisor
    )
    if implementation == "xla":
        return reference()
    kernel_options = dict(score_divisor=divisor, config=config, interpret=interpret)
    if implementation == "pallas_gpu":
        return pallas_gpu.split_k_decode_attention(
            q_bnh, k_bksh, v_bksh, lengths_b, window=window, **kernel_options
        )
    paged = lambda: pallas_tpu.paged_decode_attention(
        q_bnh, k_bksh, v_bksh, lengths_b, **kernel_options
    )
    if window is None:
        return paged()
    # A window at least as long as the cache masks nothing (global layers among local ones).
    return jax.lax.cond(jnp.asarray(window) >= k_bksh.shape[2], paged, reference)
