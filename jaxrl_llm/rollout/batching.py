"""Host-side packing of ragged prompts and stop sequences into bucketed arrays.

Shapes decide compilation: every distinct (batch, prompt length) pair is one compiled decode
program. Both are rounded up to a bucket from the series 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64,
96, ... (powers of two and 1.5x powers of two), so at most a third of a padded array is padding
and a few dozen programs cover every size up to thousands.

`stop_flags` reads the packed EOS ids and stop sequences on device: whether a sampled token
ends its row (shared by the single-turn engine and the episode decoder).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


def bucket_size(n: int, *, minimum: int = 1) -> int:
    """The smallest bucket >= max(n, minimum) from 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, ...

    Example:
      >>> [bucket_size(n) for n in (1, 5, 17, 33, 40)]
      [1, 6, 24, 48, 48]
    """
    if n < 0:
        raise ValueError(f"bucket_size: n={n} must be >= 0.")
    n = max(n, minimum, 1)
    power = 1
    while True:
        for candidate in (power, 3 * power // 2):
            if candidate >= n and (candidate == power or power >= 2):
                return candidate
        power *= 2


class PackedPrompts(NamedTuple):
    """Prompts right-padded into a bucketed [B_pad, P] array.

    Attributes:
      tokens: int32 [B_pad, P], row b holds prompt b at 0..p_b-1, then pad_id; rows >= B hold a
        single pad token.
      lengths: int32 [B_pad], p_b (1 for padding rows).
      active: bool [B_pad], True for the B real rows.
      batch_size: B, the number of real prompts.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    active: np.ndarray
    batch_size: int


def pack_prompts(
    prompts: Sequence[Sequence[int]],
    *,
    pad_id: int,
    min_prompt_bucket: int = 16,
    min_batch_bucket: int = 1,
    bucket: bool = True,
) -> PackedPrompts:
    """Right-pads ragged prompts to a bucketed length and the batch to a bucketed size.

    Args:
      prompts: B token-id sequences, each of length >= 1.
      pad_id: the filler token.
      min_prompt_bucket: the smallest padded prompt length.
      min_batch_bucket: the smallest padded batch.
      bucket: False pads to exactly the longest prompt and B rows (one program per shape).

    Returns:
      `PackedPrompts`.
    """
    if len(prompts) == 0:
        raise ValueError("generate: prompts is empty; pass at least one token-id list.")
    lengths = [len(p) for p in prompts]
    if min(lengths) < 1:
        empty = lengths.index(0)
        raise ValueError(
            f"generate: prompt {empty} is empty; every prompt needs at least one token "
            "(e.g. a BOS id) to condition the first sample on."
        )
    batch, longest = len(prompts), max(lengths)
    if bucket:
        padded_len = bucket_size(longest, minimum=min_prompt_bucket)
        padded_batch = bucket_size(batch, minimum=min_batch_bucket)
    else:
        padded_len, padded_batch = longest, batch
    tokens = np.full((padded_batch, padded_len), pad_id, dtype=np.int32)
    for b, prompt in enumerate(prompts):
        tokens[b, : lengths[b]] = np.asarray(prompt, dtype=np.int32)
    lengths_b = np.ones((padded_batch,), np.int32)
    lengths_b[:batch] = lengths
    active = np.arange(padded_batch) < batch
    return PackedPrompts(tokens, lengths_b, active, batch)


# Filler values of the packed stop sequences: ANY matches every token, NEVER matches none.
# WINDOW_EMPTY fills the decode loop's window of recent tokens before the first completion token:
# it equals neither a token nor NEVER, so no stop row can match into the prompt.
STOP_ANY, STOP_NEVER, WINDOW_EMPTY = -1, -2, -3


def pack_stop_sequences(stop_sequences: Sequence[Sequence[int]], *, minimum: int = 4) -> np.ndarray:
    """Stop sequences right-aligned in an int32 [S, W] array, padded so the shape rarely changes.

    Row i holds sequence i right-aligned with `STOP_ANY` to its left; rows past the last sequence
    are `STOP_NEVER`. S and W are buckets >= `minimum` (so up to 4 sequences of up to 4 tokens
    share one compiled program). A completion stops when its last W tokens match a row.
    """
    seqs = [list(s) for s in stop_sequences]
    if any(len(s) == 0 for s in seqs):
        raise ValueError("generate: stop_sequences must not contain an empty sequence.")
    if any(t < 0 for s in seqs for t in s):
        raise ValueError("generate: stop sequence token ids must be >= 0.")
    width = bucket_size(max([len(s) for s in seqs], default=1), minimum=minimum)
    rows = bucket_size(len(seqs), minimum=minimum)
    packed = np.full((rows, width), STOP_NEVER, dtype=np.int32)
    for i, s in enumerate(seqs):
        packed[i, :] = STOP_ANY
        packed[i, width - len(s) :] = s
    return packed


def pack_eos_ids(eos_ids: Sequence[int], *, minimum: int = 4) -> np.ndarray:
    """EOS ids in an int32 [E] array padded with -1 (never a token) to a bucket >= `minimum`."""
    ids = [int(i) for i in eos_ids]
    if any(i < 0 for i in ids):
        raise ValueError(f"generate: eos_ids {ids} must be >= 0.")
    packed = np.full((bucket_size(len(ids), minimum=minimum),), -1, np.int32)
    packed[: len(ids)] = ids
    return packed


def stop_flags(
    tokens_b: jax.Array,
    window_bw: jax.Array,
    alive_b: jax.Array,
    eos_ids_e: jax.Array,
    stop_sw: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Whether each row's new token ends it: (is_eos [B], is_stop [B]), both False where not
    `alive_b`; a stop sequence counts only when the token is not an EOS id.

    Args:
      tokens_b: int32 [B], the tokens just sampled.
      window_bw: int32 [B, W], each row's last W tokens, `tokens_b` last.
      alive_b: bool [B], the rows that sampled.
      eos_ids_e, stop_sw: `pack_eos_ids` and `pack_stop_sequences` of the config.
    """
    is_eos = alive_b & jnp.any(tokens_b[:, None] == eos_ids_e[None, :], axis=1)
    matches_bs = jnp.all(
        (stop_sw[None] == window_bw[:, None]) | (stop_sw[None] == STOP_ANY), axis=2
    )
    return is_eos, alive_b & ~is_eos & jnp.any(matches_bs, axis=1)
