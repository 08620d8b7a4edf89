"""One prompt of a verifiable task: question, reference answer, provenance and scorer.

Every prompt source (reasoning-gym, JSONL, tfds) yields `Example`s, so the rollout and reward code
never needs to know where a prompt came from: `example.score(candidate)` asks the source's own
scorer whether an extracted answer is right.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any, Protocol

from jaxrl_llm.data import scoring
from jaxrl_llm.data.split import normalize_question

__all__ = ["Example", "Scorer", "question_id"]


def question_id(question: str) -> str:
    """A short stable id of a question: the first 12 hex digits of the SHA-256 of its normalised
    text (`split.normalize_question`), the same on every machine; kept beside per-question
    records so a reader can find each question again.

    Example:
      >>> question_id("What is 2 + 3?") == question_id("  what is 2 +  3? ")
      True
    """
    return hashlib.sha256(normalize_question(question).encode("utf-8")).hexdigest()[:12]


class Scorer(Protocol):
    """A task's scorer: `(candidate answer, example) -> score in [0, 1]`; 1.0 means correct.

    Example:
      >>> def exact(candidate: str, example: Example) -> float:
      ...     return float(candidate.strip() == example.answer)
    """

    def __call__(self, candidate: str, example: Example, /) -> float: ...


def _default_scorer(candidate: str, example: Example) -> float:
    return scoring.math_answer_score(candidate, example.answer)


@dataclasses.dataclass(frozen=True)
class Example:
    """One prompt with its reference answer and the scorer of the task it came from.

    Attributes:
      question: the question text shown to the model (before the chat template).
      answer: the reference answer text, e.g. "-4" or "72".
      source: the task or dataset name, e.g. "chain_sum" or "gsm8k".
      index: position of the example in its source.
      metadata: the raw entry as the source produced it (reasoning-gym's entry dict, or the JSON
        object of a JSONL line); the source's scorer may read it.
      scorer: `(candidate, example) -> float`; None means numeric / math-verify equality with
        `answer` (`scoring.math_answer_score`). Not part of equality or the repr.
      messages: the prompt as a chat conversation (`{"role", "content"}` dicts, the last the
        user's), rendered instead of `question` (`jaxrl_llm.data.render_prompt`); None for a
        one-message prompt. `question` then holds the conversation as text.

    Example:
      >>> ex = Example(question="2 + 3 =", answer="5", source="hand", index=0)
      >>> ex.score("5.0"), ex.score("6")
      (1.0, 0.0)
    """

    question: str
    answer: str
    source: str
    index: int
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    scorer: Scorer | None = dataclasses.field(default=None, compare=False, hash=False, repr=False)
    messages: tuple[Mapping[str, str], ...] | None = dataclasses.field(
        default=None, hash=False, repr=False
    )

    def score(self, candidate: str | None) -> float:
        """Scores an already extracted candidate answer with the source's scorer.

        Args:
          candidate: the answer text pulled out of a completion (e.g. its last number); None
            (nothing extracted) scores 0.

        Returns:
          A float in [0, 1]; 1.0 means correct. Scores outside [0, 1] from a source are clipped.
        """
        if candidate is None:
            return 0.0
        scorer = _default_scorer if self.scorer is None else self.scorer
        value = scorer(candidate, self)
        return 0.0 if value is None else min(max(float(value), 0.0), 1.0)
