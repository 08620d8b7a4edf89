"""Host-side plan of a shared prefill: identical prompts once, the prefix common to all once.

A GRPO rollout samples G completions of each prompt, so a batch of B = n x G rows holds only n
different prompts; and chat prompts of one task share their whole template head (system prompt,
role markers, the task's instruction). The plain engine prefills B x P token positions. With a
plan it prefills:

  the common prefix    once, at batch 1                      L positions
  the unique suffixes  one row per different prompt          U x S positions
  then copies          cache rows: prefix -> U rows, U rows -> their B rows (no compute)

Modes (`GenerationConfig.prefix_sharing`):

  "none"       every row prefilled in full (the plain engine).
  "identical"  identical prompts prefilled once (U <= B, L = 0). Exactly the plain engine's
               numbers: the same per-row computation at a smaller batch.
  "common"     also the common prefix once. Attention of the suffix then reads the prefix from the
               cache instead of computing it alongside, which rounds differently in float32
               (log-probs within about 1e-4 of "identical"; the sampled tokens agree except at
               near-ties).

L is rounded down to a multiple of `PREFIX_QUANTUM` (so a stable chat template gives one compiled
program, and a prefix is never so short that sharing it costs more than it saves), and it always
leaves each prompt at least one suffix token (the last prompt token's logits start the decode).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxrl_llm.rollout.batching import bucket_size

PREFIX_SHARING_MODES = ("none", "identical", "common")
# The shared prefix length is a multiple of this (and at least this, or nothing is shared).
PREFIX_QUANTUM = 16
# The smallest suffix bucket.
MIN_SUFFIX_BUCKET = 8


class PrefillPlan(NamedTuple):
    """What to prefill for B_pad rows of prompts padded to P columns.

    Attributes:
      prefix: int32 [L], tokens every prompt starts with (L = 0: nothing shared).
      suffixes: int32 [U_pad, S], the different prompts' tokens from position L, right-padded
        (L + S <= P); rows >= U repeat the first suffix.
      suffix_lengths: int32 [U_pad], p_u - L >= 1.
      source: int32 [B_pad], the suffix row each batch row copies its cache from.
      num_unique: U, the number of different prompts.
    """

    prefix: np.ndarray
    suffixes: np.ndarray
    suffix_lengths: np.ndarray
    source: np.ndarray
    num_unique: int

    @property
    def copies_rows(self) -> bool:
        """False when batch row b is suffix row b (no cache gather needed)."""
        return not (
            self.suffixes.shape[0] == self.source.shape[0]
            and np.array_equal(self.source, np.arange(self.source.shape[0]))
        )

    @property
    def prefill_tokens(self) -> int:
        """Token positions this plan runs through the model: L + U_pad x S."""
        return int(self.prefix.shape[0] + self.suffixes.size)


def common_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """The length of the longest token prefix shared by every prompt."""
    first = np.asarray(prompts[0])
    n = len(first)
    for p in prompts[1:]:
        p = np.asarray(p)
        m = min(n, len(p))
        differ = np.nonzero(first[:m] != p[:m])[0]
        n = int(differ[0]) if differ.size else m
        if n == 0:
            break
    return n


def plan_prefill(
    prompts: Sequence[Sequence[int]],
    *,
    padded_batch: int,
    prompt_bucket: int,
    pad_id: int,
    mode: str = "identical",
) -> PrefillPlan:
    """Plans the prefill of B ragged prompts (already validated non-empty) for `mode`.

    Args:
      prompts: B token-id sequences.
      padded_batch: B_pad >= B, the decode batch (rows >= B are padding; they copy row 0).
      prompt_bucket: P, the padded prompt length of the decode layout.
      pad_id: filler.
      mode: one of `PREFIX_SHARING_MODES`.

    Returns:
      `PrefillPlan`; "none" gives U_pad = B_pad rows of P columns and the identity `source`.

    Example:
      >>> plan = plan_prefill([[1, 2, 3], [1, 2, 3], [1, 2, 4]], padded_batch=4,
      ...                     prompt_bucket=16, pad_id=0)
      >>> plan.num_unique, plan.source.tolist()
      (2, [0, 0, 1, 0])
    """
    if mode not in PREFIX_SHARING_MODES:
        raise ValueError(
            f"GenerationConfig.prefix_sharing={mode!r} must be one of {PREFIX_SHARING_MODES}."
        )
    prompts = [tuple(int(t) for t in p) for p in prompts]
    if mode == "none":
        unique, source = prompts, list(range(len(prompts)))
    else:
        index: dict[tuple[int, ...], int] = {}
        source = [index.setdefault(p, len(index)) for p in prompts]
        unique = list(index)
    prefix_len = 0
    if mode == "common":
        shareable = min(common_prefix_length(unique), min(len(p) for p in unique) - 1)
        prefix_len = (shareable // PREFIX_QUANTUM) * PREFIX_QUANTUM
    if prefix_len == 0:
        width = prompt_bucket
        rows = padded_batch if mode == "none" else bucket_size(len(unique))
    else:
        longest = max(len(p) for p in unique) - prefix_len
        width = min(bucket_size(longest, minimum=MIN_SUFFIX_BUCKET), prompt_bucket - prefix_len)
        rows = bucket_size(len(unique))
    suffixes = np.full((rows, width), pad_id, np.int32)
    lengths = np.ones((rows,), np.int32)
    for u, p in enumerate(unique):
        suffixes[u, : len(p) - prefix_len] = p[prefix_len:]
        lengths[u] = len(p) - prefix_len
    suffixes[len(unique) :] = suffixes[0]
    lengths[len(unique) :] = lengths[0]
    source_b = np.zeros((padded_batch,), np.int32)
    source_b[: len(source)] = source
    if mode == "none":
        source_b = np.arange(padded_batch, dtype=np.int32)
    prefix = np.asarray(prompts[0][:prefix_len], np.int32)
    return PrefillPlan(prefix, suffixes, lengths, source_b, len(unique))
