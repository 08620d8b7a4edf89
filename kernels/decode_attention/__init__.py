"""Decode attention that reads only the filled part of each row's KV cache.

``decode_attention`` is the entry point (``api.py``): one query per row over a [B, K, S, H]
cache with per-row lengths, through JAX's Pallas TPU paged attention, its Pallas GPU split-K
decode attention, or the masked full-cache XLA path (``masked_decode_attention``, the
reference); ``BlockConfig`` the tunables, ``padded_slots`` the cache length the kernels tile.
"""

from kernels.decode_attention.api import decode_attention, default_implementation, supported
from kernels.decode_attention.config import (
    DEFAULT_BLOCKS,
    IMPLEMENTATIONS,
    BlockConfig,
    padded_slots,
)
from kernels.decode_attention.reference import masked_decode_attention

__all__ = [
    "DEFAULT_BLOCKS",
    "IMPLEMENTATIONS",
    "BlockConfig",
    "decode_attention",
    "default_implementation",
    "masked_decode_attention",
    "padded_slots",
    "supported",
]
