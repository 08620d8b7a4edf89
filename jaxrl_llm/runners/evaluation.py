"""Greedy held-out evaluation: accuracy of the policy on a prompt source."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxrl_llm.data import Example
from jaxrl_llm.rewards import RewardRunner, accuracy
from jaxrl_llm.rollout.chat import (
    chat_generation_config,
    chat_generator,
    completion_texts,
    prompt_ids,
)
from jaxrl_llm.rollout.continuous import ContinuousGenerator

__all__ = ["chat_generator", "completion_texts", "greedy_accuracy", "prompt_ids"]


def greedy_accuracy(
    model,
    tokenizer,
    examples: Sequence[Example],
    rewards: RewardRunner,
    *,
    max_new_tokens: int,
    batch_size: int,
    params=None,
    system_prompt=None,
    instruction_suffix: str = "",
    min_prompt_bucket: int = 16,
    continuous: bool = True,
) -> dict[str, float]:
    """Greedy (temperature 0) accuracy and mean task score over `examples`.

    With `continuous` (the default), every prompt goes through one `ContinuousGenerator` of
    `batch_size` slots, refilled as completions finish, with the prefix every prompt shares
    prefilled once. Otherwise fixed batches, padded to `batch_size` so each reuses one compiled
    program, decode until their longest row finishes. Greedy completions are the same.
    """
    fields = dict(
        max_new_tokens=max_new_tokens, temperature=0.0, min_prompt_bucket=min_prompt_bucket
    )
    if continuous:
        config = chat_generation_config(tokenizer, prefix_sharing="common", **fields)
        generator = ContinuousGenerator(model, config, num_slots=batch_size)
        chunk_size = max(len(examples), 1)  # the batcher takes every prompt at once
    else:
        generator = chat_generator(model, tokenizer, min_batch_bucket=batch_size, **fields)
        chunk_size = batch_size
    scores, lengths = [], []
    for start in range(0, len(examples), chunk_size):
        chunk = list(examples[start : start + chunk_size])
        texts, ids = prompt_ids(
            tokenizer, chunk, system_prompt=system_prompt, instruction_suffix=instruction_suffix
        )
        rollout = generator(ids, seed=0, params=params)
        out = rewards(texts, completion_texts(tokenizer, rollout), chunk)
        scores.extend(out.per_function["task"].tolist())
        lengths.extend(np.asarray(rollout.lengths).tolist())
    return {
        "accuracy": accuracy(scores),
        "score": float(np.mean(scores)),
        "completion_length": float(np.mean(lengths)),
    }
