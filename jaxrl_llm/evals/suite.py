"""Evaluating a policy on several prompt sets at once: greedy pass@1, sampled pass@k and maj@k.

    evaluator = Evaluator(model, tokenizer, rewards, EvalSettings(num_samples=8, ks=(1, 4, 8)))
    results = evaluator([EvalSet("gcd", gcd_examples), EvalSet("gsm", jsonl_examples)])
    print(markdown_table(results))

Per set, `Evaluator` decodes every prompt greedily (one `ContinuousGenerator`: slots refilled as
completions finish, the prefix all prompts share prefilled once) and, with `num_samples` n > 0,
n sampled completions per prompt (at `temperature`, each row its own key). Metrics, each a float:

    accuracy            greedy pass@1 (fraction of prompts whose task score is exactly 1)
    score               mean task score of the greedy completions (partial credit included)
    completion_length   mean greedy completion length in tokens
    truncated           fraction of greedy completions cut at max_new_tokens (no end of turn)
    correct_cut_share   share of the right greedy answers that came from cut completions (0
                        under a scorer whose cut completions state no answer; 0 with none right)
    sample_accuracy     mean correctness of the sampled completions (sampled pass@1)
    pass@k, maj@k       for each k in `ks` up to n (`jaxrl_llm.evals.estimators`)
    sample_length, sample_truncated   as above, over the samples
    prompts             number of prompts
    distinct_prompts    number of different questions among them (case and spaces normalised)

Completions are scored by the held-out scorer (`jaxrl_llm.evals.scorers`: `config.eval.scorer`,
the same for every recipe), not by the training reward.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_llm.data import Example, question_id
from jaxrl_llm.data.split import distinct_questions
from jaxrl_llm.evals.estimators import maj_at_k, pass_at_k
from jaxrl_llm.evals.hacks import copied_input
from jaxrl_llm.evals.scorers import HeldOutScorer
from jaxrl_llm.rewards import extract_answer
from jaxrl_llm.rollout.chat import (
    chat_generation_config,
    chat_generator,
    completion_texts,
    prompt_ids,
)
from jaxrl_llm.rollout.continuous import ContinuousGenerator
from jaxrl_llm.rollout.types import FinishReason

__all__ = [
    "SELECTION_SET",
    "Decoded",
    "EvalSet",
    "EvalSettings",
    "Evaluator",
    "flat_set_metrics",
    "markdown_table",
]

# The name of a run's evaluation of its own task on the selection side of the split (logged as
# "eval/selection/<metric>"): what sweeps prune on and reports choose settings by, while the
# run's unprefixed "eval/<metric>" figures come from the test side, which tables report.
SELECTION_SET = "selection"


class EvalSet(NamedTuple):
    """A named list of examples evaluated together (a task, a JSONL file, an attack set)."""

    name: str
    examples: Sequence[Example]


def flat_set_metrics(results: Mapping[str, Mapping[str, float]], main: str) -> dict[str, float]:
    """One flat dict of an `Evaluator`'s {set name: metrics}: set `main`'s metrics unprefixed,
    every other set's as "<set>/<metric>" (what a run logs under "eval/").

    Example:
      >>> flat_set_metrics({"gcd": {"accuracy": 0.5}, "selection": {"accuracy": 0.4}}, "gcd")
      {'accuracy': 0.5, 'selection/accuracy': 0.4}
    """
    flat = dict(results[main])
    for name, metrics in results.items():
        if name != main:
            flat.update({f"{name}/{k}": v for k, v in metrics.items()})
    return flat


def describe_held_out(eval_sets) -> dict[str, dict[str, float]]:
    """{set: {"questions": n, "distinct": d}} of a run's held-out sets, each printed in one line
    (a run keeps the dict in its summary.json)."""
    described = {}
    for eval_set in eval_sets:
        questions = [e.question for e in eval_set.examples]
        described[eval_set.name] = {
            "questions": len(questions),
            "distinct": distinct_questions(questions),
        }
        side = "selection" if eval_set.name == SELECTION_SET else "test"
        print(
            f"[jaxrl_llm] held-out set {eval_set.name}: {len(questions)} questions, "
            f"{described[eval_set.name]['distinct']} distinct, from the {side} side of the "
            "split, which no training pool draws (by a hash of each problem)"
        )
    return described


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """How an `Evaluator` decodes.

    Attributes:
      max_new_tokens: most new tokens per completion.
      num_slots: rows decoded together (continuous batching) or the fixed batch size.
      num_samples: sampled completions per prompt (0: greedy only).
      ks: the k of pass@k and maj@k; those above num_samples are skipped.
      temperature: of the sampled completions.
      seed: of the sampled completions (row r of a set uses fold_in(key(seed), r)).
      min_prompt_bucket: prompts are right-padded to at least this many tokens.
      continuous: continuous batching (True) or fixed batches that decode to their longest row.
      system_prompt, instruction_suffix: as in `jaxrl_llm.data.render_prompt`.
    """

    max_new_tokens: int = 32
    num_slots: int = 50
    num_samples: int = 0
    ks: tuple[int, ...] = (1, 4, 8)
    temperature: float = 0.7
    seed: int = 0
    min_prompt_bucket: int = 16
    continuous: bool = True
    system_prompt: str | None = None
    instruction_suffix: str = ""

    def __post_init__(self):
        for name in ("max_new_tokens", "num_slots"):
            if getattr(self, name) < 1:
                raise ValueError(f"EvalSettings.{name}={getattr(self, name)} must be >= 1.")
        if self.num_samples < 0:
            raise ValueError(f"EvalSettings.num_samples={self.num_samples} must be >= 0.")
        if any(k < 1 for k in self.ks):
            raise ValueError(f"EvalSettings.ks={self.ks}: every k must be >= 1.")
        if self.num_samples and not self.temperature > 0:
            raise ValueError(
                f"EvalSettings.temperature={self.temperature} must be > 0 to sample "
                f"num_samples={self.num_samples} completions per prompt."
            )


class Decoded(NamedTuple):
    """Completions of one decode pass over examples, with their scores."""

    scores: np.ndarray  # float64 [N], 0 for a cut completion when the scorer says it has no answer
    answers: list[str | None]  # [N], None for no answer
    lengths: np.ndarray  # int [N]
    truncated: np.ndarray  # bool [N]
    copied_input: np.ndarray  # bool [N], `jaxrl_llm.evals.hacks.copied_input`
    completions: list[str]  # [N] the generated texts


class Evaluator:
    """Decodes and scores prompt sets with one model; generators (and programs) are reused.

    Args:
      model: the policy (`jaxrl_llm.models.Transformer`).
      tokenizer: its tokenizer (chat template, end-of-turn ids).
      scorer: the held-out scorer (`jaxrl_llm.evals.scorers`; accuracy counts its scores of 1,
        maj@k votes over answers read with its `answer_rule`).
      settings: `EvalSettings`.
      timeout_s: the scorer's time limit per completion (a call past it scores 0 and is
        counted, as rewards are: `RewardRunner`).

    Attributes:
      correct: {set name: bool [N]} whether each greedy answer of the set's last evaluation was
        right, in the set's order (what a report resamples for intervals over questions).
      details: {set name: {"ids": [N] str, "questions": [N] str, "completions": [N] str,
        "answers": [N] str | None, "references": [N] str, "scores": float [N], "truncated":
        bool [N], "copied_input": bool [N]}} of the same evaluation: what a person reads, and
        what `jaxrl_llm.evals.hacks` reads to find a constant answer (and how often it is the
        reference) or a copied input number.
    """

    def __init__(
        self,
        model,
        tokenizer,
        scorer: HeldOutScorer,
        settings: EvalSettings,
        *,
        timeout_s: float | None = 5.0,
    ):
        if not isinstance(scorer, HeldOutScorer):
            raise TypeError(
                f"Evaluator: scorer must be a HeldOutScorer (jaxrl_llm.evals.get_scorer), got "
                f"{type(scorer).__name__}."
            )
        self.model, self.tokenizer, self.scorer = model, tokenizer, scorer
        self.rewards = scorer.runner(timeout_s=timeout_s)
        self.settings = settings
        self.correct: dict[str, np.ndarray] = {}
        self.details: dict[str, dict[str, Any]] = {}
        self.greedy = self._generator(temperature=0.0)
        self.sampler = self._generator(settings.temperature) if settings.num_samples else None

    def _generator(self, temperature: float):
        s = self.settings
        fields = dict(
            max_new_tokens=s.max_new_tokens,
            temperature=temperature,
            min_prompt_bucket=s.min_prompt_bucket,
        )
        if s.continuous:
            config = chat_generation_config(self.tokenizer, prefix_sharing="common", **fields)
            return ContinuousGenerator(self.model, config, num_slots=s.num_slots)
        return chat_generator(self.model, self.tokenizer, min_batch_bucket=s.num_slots, **fields)

    def __call__(self, sets: Sequence[EvalSet], *, params=None) -> dict[str, dict[str, float]]:
        """{set name: metrics} for each set, in order (names must be unique)."""
        names = [s.name for s in sets]
        if len(set(names)) != len(names):
            raise ValueError(f"Evaluator: set names must be unique, got {names}.")
        return {s.name: self.evaluate_set(s, params=params) for s in sets}

    def evaluate_set(self, eval_set: EvalSet, *, params=None) -> dict[str, float]:
        """The metrics of the module docstring for one set."""
        s, examples = self.settings, list(eval_set.examples)
        if not examples:
            raise ValueError(f"Evaluator: the set {eval_set.name!r} has no examples.")
        greedy = self.decode(examples, params=params)
        right = greedy.scores == 1.0
        self.correct[eval_set.name] = right
        self.details[eval_set.name] = {
            "ids": [question_id(e.question) for e in examples],
            "questions": [e.question for e in examples],
            "completions": greedy.completions,
            "answers": greedy.answers,
            "references": [e.answer for e in examples],
            "scores": greedy.scores,
            "truncated": greedy.truncated,
            "copied_input": greedy.copied_input,
        }
        result = {
            "accuracy": float(np.mean(right)),
            "score": float(np.mean(greedy.scores)),
            "completion_length": float(np.mean(greedy.lengths)),
            "truncated": float(np.mean(greedy.truncated)),
            "correct_cut_share": float(np.sum(right & greedy.truncated) / max(np.sum(right), 1)),
            "prompts": float(len(examples)),
            "distinct_prompts": float(distinct_questions(e.question for e in examples)),
        }
        n = s.num_samples
        if n:
            repeated = [e for e in examples for _ in range(n)]  # a prompt's n samples adjacent
            sampled = self.decode(repeated, params=params, sampled=True, seed=s.seed)
            correct = (sampled.scores == 1.0).reshape(len(examples), n)
            answers = [sampled.answers[i * n : (i + 1) * n] for i in range(len(examples))]
            result["sample_accuracy"] = float(correct.mean())
            for k in sorted(set(s.ks)):
                if k > n:
                    continue
                result[f"pass@{k}"] = float(np.mean([pass_at_k(n, c, k) for c in correct.sum(1)]))
                result[f"maj@{k}"] = float(
                    np.mean(
                        [
                            maj_at_k(a, c, k, seed=s.seed)
                            for a, c in zip(answers, correct, strict=True)
                        ]
                    )
                )
            result["sample_length"] = float(np.mean(sampled.lengths))
            result["sample_truncated"] = float(np.mean(sampled.truncated))
        return result

    def decode(self, examples, *, params=None, sampled: bool = False, seed: int = 0) -> Decoded:
        """Completions of `examples` (greedy, or sampled at the settings' temperature), scored
        by the held-out scorer: scores, extracted answers (None when empty, and for a cut
        completion when the scorer's cut completions state no answer), lengths, truncation."""
        s = self.settings
        generator = self.sampler if sampled else self.greedy
        if generator is None:
            raise ValueError("Evaluator.decode(sampled=True) needs EvalSettings.num_samples > 0.")
        texts, ids = prompt_ids(
            self.tokenizer,
            examples,
            system_prompt=s.system_prompt,
            instruction_suffix=s.instruction_suffix,
        )
        # The continuous batcher takes every prompt at once; fixed batches go chunk by chunk.
        chunk = len(ids) if s.continuous else s.num_slots
        scores, answers, lengths, truncated, copied, texts_out = [], [], [], [], [], []
        for start in range(0, len(ids), chunk):
            rollout = generator(ids[start : start + chunk], seed=seed + start, params=params)
            completions = completion_texts(self.tokenizer, rollout)
            batch = examples[start : start + chunk]
            out = self.rewards(texts[start : start + chunk], completions, batch)
            scores.extend(out.per_function["task"].tolist())
            answers.extend(  # read as the scorer reads them
                extract_answer(c, e.question, rule=self.scorer.answer_rule) or None
                for c, e in zip(completions, batch, strict=True)
            )
            copied.extend(copied_input(c, e) for c, e in zip(completions, batch, strict=True))
            lengths.extend(np.asarray(rollout.lengths).tolist())
            truncated.extend((np.asarray(rollout.finish_reason) == FinishReason.LENGTH).tolist())
            texts_out.extend(completions)
        scores, truncated = np.asarray(scores, np.float64), np.asarray(truncated, bool)
        if self.scorer.cut_completions == "no_answer":  # a cut completion stated nothing
            scores = np.where(truncated, 0.0, scores)
            answers = [None if cut else a for a, cut in zip(answers, truncated, strict=True)]
        return Decoded(
            scores, answers, np.asarray(lengths), truncated, np.asarray(copied, bool), texts_out
        )


# Metrics shown as percentages in `markdown_table`; the rest as numbers.
_PERCENT = (
    "accuracy",
    "score",
    "truncated",
    "correct_cut_share",
    "sample_accuracy",
    "sample_truncated",
)


def _is_percent(metric: str) -> bool:
    return metric in _PERCENT or metric.startswith(("pass@", "maj@"))


def markdown_table(
    results: Mapping[str, Mapping[str, float]], *, columns: Sequence[str] | None = None
) -> str:
    """A Markdown table, one row per set; rates as percentages with one decimal.

    Args:
      results: {set name: metrics}, as `Evaluator` returns.
      columns: the metrics to show, in order (default: every metric any set has, in the order
        first seen).

    Example:
      >>> print(markdown_table({"gcd": {"accuracy": 0.25, "completion_length": 12.0}}))
      | set | accuracy | completion_length |
      | --- | ---: | ---: |
      | gcd | 25.0% | 12.0 |
    """
    if columns is None:
        columns = list(dict.fromkeys(m for metrics in results.values() for m in metrics))
    lines = [
        "| set | " + " | ".join(columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for name, metrics in results.items():
        cells = []
        for column in columns:
            value = metrics.get(column)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                cells.append("")
            elif _is_percent(column):
                cells.append(f"{100 * value:.1f}%")
            elif column in ("prompts", "distinct_prompts"):
                cells.append(f"{value:.0f}")
            else:
                cells.append(f"{value:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
