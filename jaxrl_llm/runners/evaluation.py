"""Held-out evaluation: a run config's `EvalSettings`, and greedy accuracy on a prompt source."""

from __future__ import annotations

from collections.abc import Sequence

import ml_collections

from jaxrl_llm.data import Example
from jaxrl_llm.evals.scorers import HeldOutScorer
from jaxrl_llm.evals.suite import EvalSet, EvalSettings, Evaluator
from jaxrl_llm.rollout.chat import chat_generator, completion_texts, prompt_ids

__all__ = ["chat_generator", "completion_texts", "eval_settings", "greedy_accuracy", "prompt_ids"]


def eval_settings(config: ml_collections.ConfigDict) -> EvalSettings:
    """The `EvalSettings` of a run config's `eval` section (prompt format from `task`)."""
    c = config
    return EvalSettings(
        max_new_tokens=c.eval.max_new_tokens,
        num_slots=c.eval.batch_size,
        num_samples=c.eval.num_samples,
        ks=tuple(c.eval.ks),
        temperature=c.eval.temperature,
        seed=c.seed,
        min_prompt_bucket=c.rollout.min_prompt_bucket,
        continuous=c.eval.continuous,
        system_prompt=c.task.system_prompt,
        instruction_suffix=c.task.instruction_suffix,
    )


def greedy_accuracy(
    model,
    tokenizer,
    examples: Sequence[Example],
    scorer: HeldOutScorer,
    *,
    max_new_tokens: int,
    batch_size: int,
    params=None,
    system_prompt=None,
    instruction_suffix: str = "",
    min_prompt_bucket: int = 16,
    continuous: bool = True,
) -> dict[str, float]:
    """Greedy (temperature 0) accuracy, mean task score, completion length and truncation rate
    over `examples` (`jaxrl_llm.evals.Evaluator` without samples), scored by `scorer`
    (`jaxrl_llm.evals.get_scorer`).

    With `continuous` (the default), every prompt goes through one `ContinuousGenerator` of
    `batch_size` slots, refilled as completions finish, with the prefix every prompt shares
    prefilled once. Otherwise fixed batches, padded to `batch_size` so each reuses one compiled
    program, decode until their longest row finishes. Greedy completions are the same.
    """
    settings = EvalSettings(
        max_new_tokens=max_new_tokens,
        num_slots=batch_size,
        min_prompt_bucket=min_prompt_bucket,
        continuous=continuous,
        system_prompt=system_prompt,
        instruction_suffix=instruction_suffix,
    )
    evaluator = Evaluator(model, tokenizer, scorer, settings)
    result = evaluator.evaluate_set(EvalSet("held-out", examples), params=params)
    del result["prompts"]
    return result
