"""`GenerationConfig`: the options of a rollout, and which of them select a compiled program."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaxrl_llm.rollout.attention_choice import DECODE_ATTENTION
from jaxrl_llm.rollout.prefix_sharing import PREFIX_SHARING_MODES


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """Options of a rollout. Hashable; the static ones select a compiled program.

    Attributes:
      max_new_tokens: N, the most tokens sampled per prompt (static).
      temperature: > 0 samples from softmax(logits / temperature); 0 is greedy (argmax). A float,
        or one per prompt. Not static: changing it does not recompile.
      top_k: keep the k most likely tokens; None disables (static).
      top_p: nucleus mass in (0, 1]; None disables. Float or one per prompt.
      min_p: keep tokens with probability >= min_p * max probability; None disables.
      eos_ids: token ids that end a completion (included in it). None takes the model config's
        `eos_token_id` when it has one; () disables.
      stop_sequences: token-id sequences that end a completion when it ends with one of them
        (included in it; matched within the completion only).
      pad_id: filler after each completion (and in padded prompts).
      min_prompt_bucket: prompts are right-padded to a bucket >= this (see `batching.bucket_size`).
      min_batch_bucket: the batch is padded to a bucket >= this.
      cache_dtype: dtype name of the KV cache; None uses the model dtype.
      compaction: when the live rows fit a batch half the size, gather them into it and decode
        on (stages B_pad, B_pad/2, ... >= min_compact_batch, all in one program), so finished
        rows stop costing decode work. The same tokens and log-probs as without.
      min_compact_batch: the smallest compacted batch. 8 keeps results bitwise equal to the
        uncompacted engine on XLA:CPU, whose matmuls round differently below 8 rows.
      prefix_sharing: "identical" prefills identical prompts once (a GRPO group's G rows) and
        copies their cache rows, exactly; "common" also prefills the prefix every prompt shares
        once (float32 rounding differs slightly); "none" prefills every row in full. See
        `jaxrl_llm.rollout.prefix_sharing`.
      decode_attention: the decode steps' attention, one of `DECODE_ATTENTION`: "auto" (the
        platform's kernel that reads only each row's filled cache blocks where it fits, else
        the masked full-cache "xla" path), "xla", "kernel", or a kernel by name
        ("pallas_tpu", "pallas_gpu": interpreted on a CPU). See
        `jaxrl_llm.rollout.attention_choice`.
    """

    max_new_tokens: int
    temperature: float | tuple[float, ...] = 1.0
    top_k: int | None = None
    top_p: float | tuple[float, ...] | None = None
    min_p: float | tuple[float, ...] | None = None
    eos_ids: tuple[int, ...] | None = None
    stop_sequences: tuple[tuple[int, ...], ...] = ()
    pad_id: int = 0
    min_prompt_bucket: int = 16
    min_batch_bucket: int = 1
    cache_dtype: str | None = None
    compaction: bool = True
    min_compact_batch: int = 8
    prefix_sharing: str = "identical"
    decode_attention: str = "auto"

    def __post_init__(self):
        if not isinstance(self.max_new_tokens, (int, np.integer)) or self.max_new_tokens < 1:
            raise ValueError(
                f"GenerationConfig: max_new_tokens={self.max_new_tokens!r} must be >= 1."
            )
        if self.prefix_sharing not in PREFIX_SHARING_MODES:
            raise ValueError(
                f"GenerationConfig: prefix_sharing={self.prefix_sharing!r} must be one of "
                f"{PREFIX_SHARING_MODES}."
            )
        if self.decode_attention not in DECODE_ATTENTION:
            raise ValueError(
                f"GenerationConfig: decode_attention={self.decode_attention!r} must be one of "
                f"{DECODE_ATTENTION}."
            )
        if self.min_compact_batch < 1:
            raise ValueError(
                f"GenerationConfig: min_compact_batch={self.min_compact_batch} must be >= 1."
            )
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"GenerationConfig: top_k={self.top_k} must be >= 1 (or None).")
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            if isinstance(value, (list, np.ndarray)):
                object.__setattr__(self, name, tuple(float(v) for v in value))
        for t in np.atleast_1d(self.temperature):
            if t < 0:
                raise ValueError(f"GenerationConfig: temperature={t} must be >= 0 (0 = greedy).")
        if self.top_p is not None:
            for p in np.atleast_1d(self.top_p):
                if not 0 < p <= 1:
                    raise ValueError(f"GenerationConfig: top_p={p} must be in (0, 1].")
        if self.min_p is not None:
            for p in np.atleast_1d(self.min_p):
                if not 0 <= p <= 1:
                    raise ValueError(f"GenerationConfig: min_p={p} must be in [0, 1].")
        if self.eos_ids is not None:
            object.__setattr__(self, "eos_ids", tuple(int(i) for i in self.eos_ids))
        object.__setattr__(
            self, "stop_sequences", tuple(tuple(int(t) for t in s) for s in self.stop_sequences)
        )

    def replace(self, **changes: Any) -> GenerationConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
