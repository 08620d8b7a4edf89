"""Chance-corrected task reward: a constant answer that is right by chance earns 0 in expectation.

A task whose answers are few and uneven pays a policy that ignores the question: on the gcd preset
(two numbers up to 60) the reference is "2" for 30% of the training questions and "1" for 23%, so
always answering "2" is right 30% of the time, and GRPO's gcd samples collapsed onto "2"
(docs/recipe.md). The correction subtracts what an answer earns by chance, as Cohen's kappa does
for agreement between two raters:

    kappa = (p_o - p_e) / (1 - p_e)

with p_o the observed agreement and p_e the agreement expected by chance ("A coefficient of
agreement for nominal scales", Cohen 1960, Educational and Psychological Measurement 20(1)).
Per sample, with p_o the sample's task score s (1 right, 0 wrong; partial credit in between) and
p_e = q(a), the share of the task's training questions whose reference answer is the sample's
answer a:

    r = (s - q(a)) / (1 - q(a))      so r = 1 when right, r = -q(a) / (1 - q(a)) when wrong.

For any answer distribution p that ignores the question (a constant is one),
E[r] = sum_a p(a) [q(a) * 1 + (1 - q(a)) * (-q(a) / (1 - q(a)))] = 0 over the training questions,
while a right answer still earns exactly 1, so an honest policy earns its accuracy in full and
accuracy (score == 1) keeps its meaning. The numerator alone, s - q(a), has the same zero
expectation, but pays a right answer only 1 - q(a): a right "1" on gcd would earn 0.77 and on
letter_counting (answer "1" on 74% of questions) 0.26, which weakens the signal on the common
answers a policy must also get right. The price of the normalised form is a penalty that grows
without bound as q(a) -> 1 (-2.9 for a wrong "1" on letter_counting).

The zero expectation holds for the rewards, and for advantages that only centre each group
(Dr. GRPO, `loss.normalize_std=False`). GRPO's division of each group by its own std gives a
group where the common answer is right and one where it is wrong the same spread, so the
penalty's size is lost: a question-blind answer of share q(a) gains 2 q(a) - 1 units of
advantage on average, which pays the common answer when q(a) > 1/2 and charges it when
q(a) < 1/2. (It is not what made letter_counting's runs collapse onto "1", q = 0.74: a run with
centred groups collapsed the same way; docs/recipe.md, 2026-11-29.)

A completion that states no answer (nothing the answer rule reads as a number) is charged as the
costliest wrong answer, share max_a q(a). Charged nothing, it would rank above every wrong guess
of its group, and under group-normalised advantages (which divide the small spread of a group of
wrong answers by its std) the policy learns to stop at once: Gemma 3 270M's GRPO run on
basic_arithmetic went from 3.5 tokens per answer to 1 (an empty answer) in 4 steps, 2026-11-26.

Where the run builds it (`jaxrl_llm.runners.components.build_rewards`), the correction is a
reward function of its own, "chance" = r - s, weighted like "task", so the total is
task_weight * r while `per_function["task"]` (what `reward/accuracy` and the evaluator count)
stays the plain score.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from jaxrl_llm.data import Example, task_pool
from jaxrl_llm.rewards.extraction import number_key
from jaxrl_llm.rewards.verifiers import extract_answer

__all__ = [
    "AnswerPrior",
    "answer_prior",
    "chance_corrected",
    "chance_correction",
    "task_answer_prior",
]

# The config field the errors below name.
_FIELD = "config.rewards.chance_correction"


@dataclasses.dataclass(frozen=True)
class AnswerPrior:
    """How often each reference answer occurs among a task's training questions: q(a).

    Attributes:
      shares: canonical answer (`extraction.number_key`) -> share of the questions, summing to 1.
      num_questions: the questions counted.

    Example:
      >>> prior = answer_prior(["1", "2", "2", "2.0"], task="hand")
      >>> prior.share("2"), prior.share(" 1. "), prior.share("7"), prior.share("seven")
      (0.75, 0.25, 0.0, 0.75)
    """

    shares: Mapping[str, float]
    num_questions: int

    def share(self, answer: str | None) -> float:
        """q(answer): the share of the questions whose reference has the answer's value; 0 for a
        number no counted question has; for no answer (None, or text that is not one number)
        the largest share, so that stating nothing costs as much as the costliest wrong guess
        (see the module docstring)."""
        key = None if answer is None else number_key(answer)
        if key is None:
            return max(self.shares.values())
        return self.shares.get(key, 0.0)


def answer_prior(answers: Iterable[str], *, task: str) -> AnswerPrior:
    """The `AnswerPrior` of a task's reference answers (each counted by value: "2.0" is "2").

    Args:
      answers: the reference answers of the task's training questions.
      task: the task's name, for the error messages.

    Raises:
      ValueError, in one line naming `config.rewards.chance_correction`: an answer is not one
        number (the task's answers are not discrete values a constant could hit), or every
        answer is the same (no answer is right by chance: there is nothing to correct).

    Example:
      >>> answer_prior(["1", "1", "2", "3"], task="gcd").shares
      mappingproxy({'1': 0.5, '2': 0.25, '3': 0.25})
    """
    counts: collections.Counter[str] = collections.Counter()
    for answer in answers:
        key = number_key(answer)
        if key is None:
            raise ValueError(
                f"{_FIELD}=True needs a task whose answers are single numbers, but task "
                f"{task!r} has the answer {answer[:40]!r}; set {_FIELD}=False."
            )
        counts[key] += 1
    total = sum(counts.values())
    if len(counts) < 2:
        raise ValueError(
            f"{_FIELD}=True needs at least two different answers among task {task!r}'s "
            f"{total} training questions (found {list(counts)}); set {_FIELD}=False."
        )
    shares = {key: count / total for key, count in sorted(counts.items(), key=lambda kv: -kv[1])}
    return AnswerPrior(MappingProxyType(shares), total)


# task_answer_prior's cache: the run's validation and its reward builder ask for the same prior.
_PRIORS: dict[str, AnswerPrior] = {}


def task_answer_prior(task_section: Any, *, seed: int) -> AnswerPrior:
    """The `AnswerPrior` of a run's training pool: `task_pool(task_section, side="train",
    seed=seed)`, the `train_size` questions the run trains on, or every train-side row of the
    user's data (`config.task.data`; its answers must be single numbers), computed once per
    process.

    Args:
      task_section: a run config's `task` section.
      seed: the run's `config.seed` (the pool's draw).

    Example:
      >>> prior = task_answer_prior(config.task, seed=config.seed)   # gcd: q("2") is about 0.30
    """
    kwargs = task_section.kwargs
    kwargs = kwargs.to_dict() if hasattr(kwargs, "to_dict") else dict(kwargs)
    data = task_section.get("data") or {}  # the user's prompts (config.task.data), if any
    data = data.to_dict() if hasattr(data, "to_dict") else dict(data)
    key = repr(
        (
            task_section.name,
            sorted(kwargs.items()),
            sorted(data.items()),
            task_section.train_size,
            task_section.get("held_out_fraction"),
            task_section.get("selection_fraction"),
            task_section.get("split_by"),
            seed,
        )
    )
    if key not in _PRIORS:
        pool = task_pool(task_section, side="train", seed=seed)
        _PRIORS[key] = answer_prior((e.answer for e in pool), task=task_section.name)
    return _PRIORS[key]


def chance_corrected(score: float, share: float) -> float:
    """Cohen's kappa of one sample: (score - share) / (1 - share).

    Args:
      score: the task score s in [0, 1] (1 right).
      share: q(a) in [0, 1), the chance that the sample's answer is right on a random question.

    Example:
      >>> chance_corrected(1.0, 0.3), chance_corrected(0.0, 0.3), chance_corrected(0.0, 0.0)
      (1.0, -0.4285714285714286, 0.0)
    """
    if not 0.0 <= share < 1.0:
        raise ValueError(f"chance_corrected: share={share} must be in [0, 1).")
    return (score - share) / (1.0 - share)


def chance_correction(
    prompt: str,
    completion: str,
    example: Example,
    *,
    prior: AnswerPrior,
    task: Any,
    rule: str = "last_number",
) -> float:
    """The reward function "chance": `chance_corrected(s, q(a)) - s`, added to the task reward s.

    It is 0 for a right answer and -q(a) / (1 - q(a)) for a wrong one (-(1 - s) q(a) / (1 - q(a))
    with partial credit s), so task + chance is the per-sample kappa of the module docstring.

    Args:
      prompt, completion, example: as every reward function.
      prior: the task's `AnswerPrior` (`task_answer_prior`).
      task: the run's task reward (`task_reward` or `exact_task_reward`): s is
        `task(prompt, completion, example, rule=rule)`.
      rule: the answer rule of both s and a (`rewards.ANSWER_RULES`).

    Example (gcd, q("2") = 0.3; the reference is "1"):
      >>> chance_correction(p, "The GCD is 2.", ex, prior=prior, task=exact_task_reward)
      -0.42857142857142855
    """
    score = task(prompt, completion, example, rule=rule)
    share = prior.share(extract_answer(completion, example.question, rule=rule))
    return chance_corrected(score, share) - score
