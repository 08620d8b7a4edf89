"""Verifiable rewards: plain functions `(prompt, completion, example) -> float`.

`task_reward` asks the example's own scorer (reasoning-gym's `score_answer`, or numeric equality for
GSM8K-style data) about the answer extracted from the completion under an answer rule
(`ANSWER_RULES`: the last number, or the number the completion states); `format_reward` rewards a short
completion that states one unambiguous number; `math_verify_reward` compares free-form math
(LaTeX, fractions, expressions) with math-verify. Run several through `RewardRunner`, which adds
time limits, error counting and weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxrl_llm.data import Example, scoring
from jaxrl_llm.rewards.extraction import (
    extract_last_number,
    extract_stated_number,
    extract_tagged_answer,
    find_numbers,
)

__all__ = [
    "ANSWER_RULES",
    "accuracy",
    "check_answer_rule",
    "exact_task_reward",
    "extract_answer",
    "format_reward",
    "math_verify_reward",
    "task_reward",
]

# format_reward's length limit, in characters of the stripped completion.
FORMAT_MAX_CHARS = 200


# How a completion's answer is read (`extract_answer`): "last_number" pays a completion that ends
# on a number copied from the question (the lcm hack of docs/recipe.md); "stated" does not.
ANSWER_RULES = ("last_number", "stated")


def check_answer_rule(rule: str, *, field: str = "config.rewards.answer_rule") -> None:
    """Raises ValueError, in one line naming `field` and the choices, unless `rule` is an answer rule.

    Example:
      >>> check_answer_rule("stated")
      >>> check_answer_rule("last")
      Traceback (most recent call last):
      ValueError: config.rewards.answer_rule='last' is not an answer rule; set it to one of ...
    """
    if rule not in ANSWER_RULES:
        raise ValueError(
            f"{field}={rule!r} is not an answer rule; set it to one of {ANSWER_RULES} "
            "(jaxrl_llm.rewards.extract_answer)."
        )


def extract_answer(completion: str, question: str = "", *, rule: str = "last_number") -> str | None:
    """The answer a completion gives, under an answer rule (`ANSWER_RULES`).

    Both rules take the content of the last `<answer>...</answer>` span if there is one, and the
    whole stripped completion if it has no number (a task whose answers are words). Otherwise:
      "last_number": the last number.
      "stated": `extraction.extract_stated_number(completion, question)`: the last number unless
        it copies a number of `question` without stating it as the answer (no "=", "is",
        "equals", "answer:" ... right before it, and the completion is not that bare number);
        then the last stated number, or None (no answer: the completion scores 0).

    Args:
      completion: the generated text.
      question: the question answered (`Example.question`); read by "stated" only.
      rule: "last_number" (the default, the rule every run used before "stated") or "stated".

    Example:
      >>> extract_answer("4 + 3 = 7"), extract_answer("<answer>seven</answer>"), extract_answer(" no ")
      ('7', 'seven', 'no')
      >>> lcm = "Find the Least Common Multiple (LCM) of these numbers: 2, 4"
      >>> hack = "LCM(2, 4)\nThe LCM(2, 4) is the smallest multiple of"
      >>> extract_answer(hack, lcm), extract_answer(hack, lcm, rule="stated")
      ('4', None)
    """
    check_answer_rule(rule, field="extract_answer(rule=...)")
    tagged = extract_tagged_answer(completion)
    if tagged is not None:
        return tagged
    number = extract_last_number(completion)
    if number is None:
        return completion.strip()
    return number if rule == "last_number" else extract_stated_number(completion, question)


def task_reward(
    prompt: str, completion: str, example: Example, *, rule: str = "last_number"
) -> float:
    """The example's scorer applied to the completion's extracted answer; 1.0 means correct.

    The answer is `extract_answer(completion, example.question, rule=rule)`: a tagged `<answer>`
    span, else the last number ("last_number") or the stated number ("stated"), else the stripped
    completion. Partial credit is whatever the task's scorer gives (reasoning-gym's default scorer
    gives len(reference) / len(candidate) when the reference is a substring).

    Args:
      prompt: the rendered prompt (unused; part of the reward signature).
      completion: the generated text.
      example: the prompt's Example.
      rule: the answer rule (`ANSWER_RULES`).

    Example (reasoning-gym chain_sum, reference "7"):
      >>> task_reward(p, "4 + 3 = 7.", ex), task_reward(p, "The answer is 8", ex)
      (1.0, 0.0)
    """
    del prompt
    return example.score(extract_answer(completion, example.question, rule=rule))


def exact_task_reward(
    prompt: str, completion: str, example: Example, *, rule: str = "last_number"
) -> float:
    """1.0 when `task_reward` is exactly 1 (the answer is right), else 0.0: no partial credit.

    Partial credit can be farmed: reasoning-gym's default scorer gives len(reference) /
    len(candidate) when the reference is a substring of the answer, so "315" earns 1/3 for a
    reference "3" and a policy learns to write numbers that contain the answer's digits
    (measured on gcd at learning rate 5e-5, docs/recipe.md). This is the default task reward.

    Example (reference "3"):
      >>> task_reward(p, "It is 315.", ex), exact_task_reward(p, "It is 315.", ex)
      (0.3333333333333333, 0.0)
    """
    return 1.0 if task_reward(prompt, completion, example, rule=rule) == 1.0 else 0.0


def format_reward(
    prompt: str, completion: str, example: Example, *, max_chars: int = FORMAT_MAX_CHARS
) -> float:
    """1.0 if the completion is a short, unambiguous final answer, else 0.0.

    The rule: after stripping whitespace, the completion is non-empty, at most `max_chars`
    characters long (so it was not cut off mid-reasoning by the token limit), and contains exactly
    one number (as `find_numbers` counts them: "1,234" and "-3.5" are one number each). The
    number's correctness does not matter; that is `task_reward`'s job. Use
    `functools.partial(format_reward, max_chars=...)` for another limit.

    Example:
      >>> format_reward(p, "The answer is 7.", ex), format_reward(p, "3 + 4 = 7", ex)
      (1.0, 0.0)
    """
    del prompt, example
    text = completion.strip()
    if not text or len(text) > max_chars:
        return 0.0
    return 1.0 if len(find_numbers(text)) == 1 else 0.0


def length_reward(prompt: str, completion: str, example: Example, *, max_words: int = 64) -> float:
    """min(words / max_words, 1): a reward for length alone, the classic signal a policy farms
    (longer answers, whatever they say). Weighted in by `config.rewards.length_weight`, it
    makes the reward hacking `jaxrl_llm.constraints` is built to stop; see docs/constraints.md.

    Example:
      >>> length_reward(p, "The answer is 7.", ex, max_words=8)
      0.5
    """
    del prompt, example
    return min(len(completion.split()) / max_words, 1.0)


def math_verify_reward(prompt: str, completion: str, example: Example) -> float:
    """1.0 if math-verify finds the completion's final answer equal to `example.answer`.

    math-verify extracts the answer from the completion itself (a `\\boxed{}` or the last LaTeX /
    plain expression), so free-form answers such as "\\frac{1}{2}", "0.5" or "50\\%" compare by
    value. The reference is parsed the same way (wrapped in $...$ if it is bare LaTeX).

    Example:
      >>> math_verify_reward(p, "so the answer is $\\boxed{\\frac{1}{2}}$", Example("q", "0.5", "s", 0))
      1.0
    """
    del prompt
    gold = scoring.parse_math(example.answer)
    pred = scoring.parse_math(completion)
    if not gold or not pred:
        return 0.0
    return 1.0 if scoring.verify_parsed(gold, pred) else 0.0


def accuracy(scores: Sequence[float] | np.ndarray) -> float:
    """Fraction of scores exactly equal to 1.0 (partial credit does not count).

    Example:
      >>> accuracy([1.0, 0.0, 0.5, 1.0])
      0.5
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.size == 0:
        raise ValueError("accuracy: no scores.")
    return float(np.mean(scores == 1.0))
