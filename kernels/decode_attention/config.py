"""Tunables of the decode attention kernels: one frozen dataclass, and the cache length they tile.

Both kernels walk a row's cache in blocks of `block_slots` slots and stop after the block that
holds its last filled slot, so a row of length L reads ceil(L / block_slots) blocks:

- ``pallas_tpu`` (JAX's paged attention): a block is one page of `block_slots` slots; a page's
  [block_slots, H] tile must be a multiple of the TPU's (16, 128) bfloat16 tile in its slots.
- ``pallas_gpu`` (JAX's split-K decode attention, Triton): a block is `block_k`; Triton tiles
  need power-of-2 sizes >= 16. The cache is also split into up to `max_splits` chunks that run
  as separate programs (flash-decoding, for occupancy at small batch), merged afterwards.

The cache's slot count S must be a multiple of `block_slots`: the decode engine pads it
(`padded_slots`); the extra slots are never read.
"""

from __future__ import annotations

import dataclasses

__all__ = ["BlockConfig", "DEFAULT_BLOCKS", "IMPLEMENTATIONS", "padded_slots"]

# Every name `decode_attention(implementation=...)` accepts.
IMPLEMENTATIONS = ("xla", "pallas_tpu", "pallas_gpu")


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Block sizes of the decode attention kernels.

    Attributes:
      block_slots: cache slots per block (TPU page, GPU ``block_k``): a power of 2 >= 16.
      max_splits: the most chunks the GPU kernel splits a row's cache into.
    """

    block_slots: int = 128
    max_splits: int = 16

    def __post_init__(self):
        value = self.block_slots
        if not isinstance(value, int) or value < 16 or value & (value - 1):
            raise ValueError(f"block_slots={value!r} must be a power of 2 >= 16 (TPU, GPU tiles)")
        if not isinstance(self.max_splits, int) or self.max_splits < 1:
            raise ValueError(f"max_splits={self.max_splits!r} must be a positive int")

    def splits(self, slots: int) -> int:
        """The GPU kernel's chunks for a cache of `slots` slots: the most, up to `max_splits`,
        that cut it into equal runs of whole blocks.

        Example:
          >>> BlockConfig(block_slots=128, max_splits=16).splits(1152)  # 9 blocks: 9 chunks
          9
        """
        blocks = slots // self.block_slots
        return max(d for d in range(1, min(blocks, self.max_splits) + 1) if blocks % d == 0)


# The blocks the decode engine pads its cache for and the kernels run with.
DEFAULT_BLOCKS = BlockConfig()


def padded_slots(slots: int, implementation: str, config: BlockConfig = DEFAULT_BLOCKS) -> int:
    """The cache length an implementation tiles: `slots` rounded up to a whole block for the
    kernels, `slots` itself for ``"xla"``.

    Example:
      >>> padded_slots(255, "pallas_tpu"), padded_slots(255, "xla")
      (256, 255)
    """
    if implementation == "xla":
        return slots
    return -(-slots // config.block_slots) * config.block_slots
