"""Sampling the policy on task prompts and scoring the samples: the labels of the stages that
learn from the policy's own samples (reward-model pairs, process-reward step labels, ReST-EM /
RAFT's E-step).

    sampler = task_sampler(config, policy, tokenizer, examples, max_new_tokens=64,
                           temperature=1.0)
    texts = sampler.sample([sampler.ids[0]] * 4, seed=0)          # 4 completions of prompt 0
    scores = sampler.score([sampler.texts[0]] * 4, texts, [examples[0]] * 4)
    prompts, completions, scores_ng = sample_groups(config, policy, tokenizer, examples,
                                                    group_size=8, max_new_tokens=64,
                                                    temperature=1.0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_llm.stages.sample_journal import SampleJournal

__all__ = ["TaskSampler", "sample_groups", "task_sampler"]


class TaskSampler(NamedTuple):
    """Task prompts rendered for the policy, its sampler and the task's verifier.

    Attributes:
      texts: the rendered prompt text of each example [N].
      ids: their token ids [N].
      sample: `(prompt ids [B], seed, params=None) -> completion texts [B]`; row b draws with
        `fold_in(key(seed), b)`.
      score: `(prompt texts, completions, examples) -> float32 [B]`, the verifier's scores
        (`config.rewards`' "task" function).
    """

    texts: list[str]
    ids: list[list[int]]
    sample: Callable[..., list[str]]
    score: Callable[[Sequence[str], Sequence[str], Sequence[Any]], np.ndarray]


def task_sampler(
    config,
    policy,
    tokenizer,
    examples: Sequence[Any],
    *,
    max_new_tokens: int,
    temperature: float,
    journal: str | None = None,
) -> TaskSampler:
    """The `TaskSampler` of `examples` (task `Example`s) under the stage config's prompt format
    (`config.task`) and rewards (`config.rewards`). With `journal` (a file path), decode calls
    of the policy's own parameters are kept there and replayed by a rerun (`SampleJournal`)."""
    from jaxrl_llm.rollout.chat import chat_generator, completion_texts, prompt_ids
    from jaxrl_llm.runners import components

    task = config.task
    texts, ids = prompt_ids(
        tokenizer,
        examples,
        system_prompt=task.system_prompt,
        instruction_suffix=task.instruction_suffix,
    )
    generator = chat_generator(
        policy, tokenizer, max_new_tokens=max_new_tokens, temperature=temperature
    )
    rewards = components.build_rewards(config)

    def sample(rows: Sequence[Sequence[int]], seed: int, params=None) -> list[str]:
        return completion_texts(tokenizer, generator(rows, seed=seed, params=params))

    if journal is not None:
        settings = {
            "model": config.model.to_dict(),
            "max_new_tokens": max_new_tokens,
            "temperature": temperature,
        }
        sample = SampleJournal(journal, settings).wrap(sample)

    def score(prompts, completions, rows_examples) -> np.ndarray:
        return rewards(prompts, completions, rows_examples).per_function["task"]

    return TaskSampler(texts, ids, sample, score)


def sample_groups(
    config,
    policy,
    tokenizer,
    examples: list,
    *,
    group_size: int,
    max_new_tokens: int,
    temperature: float,
    params=None,
    seed: int | None = None,
    journal: str | None = None,
) -> tuple[list[str], list[list[str]], np.ndarray]:
    """`group_size` sampled completions of each example's chat prompt, scored by the task's
    verifier (`config.rewards`' "task" function).

    Args:
      config: the stage config (`task` renders the prompts, `rewards` scores).
      policy, tokenizer: the sampling model and its tokenizer.
      examples: N task `Example`s.
      group_size, max_new_tokens, temperature: G samples per prompt and how they are drawn.
      params: the policy's parameters to sample with (None: the model's own).
      seed: the base sampling seed (None: `config.seed`); decode call c uses seed + its first
        prompt's index, so a rerun draws the same samples.
      journal: a file keeping the decode calls for a rerun to replay (`task_sampler`).

    Returns:
      (rendered prompt texts [N], completions [N][G], verifier scores float32 [N, G]).
    """
    seed = config.seed if seed is None else seed
    sampler = task_sampler(
        config, policy, tokenizer, examples, max_new_tokens=max_new_tokens,
        temperature=temperature, journal=journal,
    )  # fmt: skip
    texts = sampler.texts
    completions, scores = [], []
    chunk = max(1, 64 // group_size)  # prompts per decode call (at most 64 rows)
    for start in range(0, len(examples), chunk):
        batch = range(start, min(start + chunk, len(examples)))
        group_ids = [sampler.ids[i] for i in batch for _ in range(group_size)]
        texts_out = sampler.sample(group_ids, seed + start, params)
        group_texts = [texts[i] for i in batch for _ in range(group_size)]
        group_examples = [examples[i] for i in batch for _ in range(group_size)]
        scores.append(sampler.score(group_texts, texts_out, group_examples))
        completions += [texts_out[j : j + group_size] for j in range(0, len(texts_out), group_size)]
    scores_ng = np.concatenate(scores).reshape(len(examples), group_size).astype(np.float32)
    return texts, completions, scores_ng
