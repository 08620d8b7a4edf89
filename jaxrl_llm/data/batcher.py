"""Batches of prompts over epochs, resumable from one integer.

The batcher's whole state is `position`, the number of examples handed out so far. Example number
`p` of the stream is `source[perm_e[p % N]]` with epoch `e = p // N` and `perm_e` a permutation drawn
from `(seed, e)` alone; so saving `position` in a checkpoint and restoring it replays exactly the
batches an uninterrupted run would have seen. Batches are always full: the last batch of an epoch
takes its remainder from the next epoch's permutation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

import numpy as np

from jaxrl_llm.data.example import Example

__all__ = ["PromptBatcher", "PromptSource"]


class PromptSource(Protocol):
    """A finite, indexable collection of examples (every source in `jaxrl_llm.data` is one).

    Example:
      >>> source: PromptSource = [Example("2 + 3 =", "5", "hand", 0)]  # a list works too
    """

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Example: ...


class PromptBatcher:
    """An endless iterator of `batch_size`-long lists of Examples, reshuffled every epoch.

    Args:
      source: indexable examples, e.g. `ReasoningGymSource` or `JsonlSource`.
      batch_size: examples per batch (may exceed `len(source)`: a batch then spans epochs).
      seed: seeds every epoch's permutation, `numpy.random.default_rng([seed, epoch])`.
      shuffle: False walks the source in order every epoch.

    Example:
      >>> batcher = PromptBatcher(source, batch_size=8, seed=0)
      >>> first = next(batcher)
      >>> state = batcher.state()            # {"position": 8}
      >>> resumed = PromptBatcher(source, batch_size=8, seed=0)
      >>> resumed.restore(state)
      >>> next(resumed) == next(batcher)
      True
    """

    def __init__(self, source: PromptSource, *, batch_size: int, seed: int, shuffle: bool = True):
        if len(source) == 0:
            raise ValueError("PromptBatcher: the source is empty.")
        if batch_size <= 0:
            raise ValueError(f"PromptBatcher: batch_size={batch_size} must be positive.")
        self.source, self.batch_size, self.seed, self.shuffle = source, batch_size, seed, shuffle
        self.position = 0
        self._cached_epoch, self._cached_order = -1, np.arange(0)

    @property
    def epoch(self) -> int:
        """The epoch the next example comes from."""
        return self.position // len(self.source)

    def order(self, epoch: int) -> np.ndarray:
        """[N] source indices in the order epoch `epoch` visits them."""
        if epoch != self._cached_epoch:
            n = len(self.source)
            if self.shuffle:
                self._cached_order = np.random.default_rng([self.seed, epoch]).permutation(n)
            else:
                self._cached_order = np.arange(n)
            self._cached_epoch = epoch
        return self._cached_order

    def indices(self, position: int, count: int) -> list[int]:
        """Source indices of stream examples `position, ..., position + count - 1`."""
        n = len(self.source)
        return [int(self.order(p // n)[p % n]) for p in range(position, position + count)]

    def __iter__(self) -> Iterator[list[Example]]:
        return self

    def __next__(self) -> list[Example]:
        batch = [self.source[i] for i in self.indices(self.position, self.batch_size)]
        self.position += self.batch_size
        return batch

    def state(self) -> dict[str, int]:
        """The resumable state: `{"position": examples consumed}`."""
        return {"position": self.position}

    def restore(self, state: Mapping[str, int]) -> None:
        """Continues from a `state()` saved by a batcher with the same source, batch size and seed."""
        if set(state) != {"position"}:
            raise ValueError(
                f"PromptBatcher.restore: expected {{'position': int}}, got {dict(state)}."
            )
        position = int(state["position"])
        if position < 0:
            raise ValueError(f"PromptBatcher.restore: position={position} must be >= 0.")
        self.position = position
