"""Verifiable rewards: plain functions `(prompt, completion, example) -> float`.

`task_reward` asks the example's own scorer (reasoning-gym's `score_answer`, or numeric equality for
GSM8K-style data) about the answer extracted from the completion; `format_reward` rewards a short
completion that states one unambiguous number; `math_verify_reward` compares free-form math
(LaTeX, fractions, expressions) with math-verify. Run several through `RewardRunner`, which adds
time limits, error counting and weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxrl_llm.data import Example, scoring
from jaxrl_llm.rewards.extraction import extract_last_number, extract_tagged_answer, find_numbers

__all__ = [
    "accuracy",
    "exact_task_reward",
    "extract_answer",
    "format_reward",
    "math_verify_reward",
    "task_reward",
]

# format_reward's length limit, in characters of the stripped completion.
FORMAT_MAX_CHARS = 200


def extract_answer(completion: str) -> str:
    """The answer a completion states: its last `<answer>...</answer>` span if it has one, else its
    last number, else the whole completion stripped.

    Example:
      >>> extract_answer("4 + 3 = 7"), extract_answer("<answer>seven</answer>"), extract_answer(" no ")
      ('7', 'seven', 'no')
    """
    tagged = extract_tagged_answer(completion)
    if tagged is not None:
        return tagged
    number = extract_last_number(completion)
    return completion.strip() if number is None else number


def task_reward(prompt: str, completion: str, example: Example) -> float:
    """The example's scorer applied to the completion's extracted answer; 1.0 means correct.

    The answer is `extract_answer(completion)`: a tagged `<answer>` span, else the last number,
    else the stripped completion. Partial credit is whatever the task's scorer gives (reasoning-gym's
    default scorer gives len(reference) / len(candidate) when the reference is a substring).

    Args:
      prompt: the rendered prompt (unused; part of the reward signature).
      completion: the generated text.
      example: the prompt's Example.

    Example (reasoning-gym chain_sum, reference "7"):
      >>> task_reward(p, "4 + 3 = 7.", ex), task_reward(p, "The answer is 8", ex)
      (1.0, 0.0)
    """
    del prompt
    return example.score(extract_answer(completion))


def exact_task_reward(prompt: str, completion: str, example: Example) -> float:
    """1.0 when `task_reward` is exactly 1 (the answer is right), else 0.0: no partial credit.

    Partial credit can be farmed: reasoning-gym's default scorer gives len(reference) /
    len(candidate) when the reference is a substring of the answer, so "315" earns 1/3 for a
    reference "3" and a policy learns to write numbers that contain the answer's digits
    (measured on gcd at learning rate 5e-5, docs/recipe.md). This is the default task reward.

    Example (reference "3"):
      >>> task_reward(p, "It is 315.", ex), exact_task_reward(p, "It is 315.", ex)
      (0.3333333333333333, 0.0)
    """
    return 1.0 if task_reward(prompt, completion, example) == 1.0 else 0.0


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
