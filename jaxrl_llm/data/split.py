"""Train / held-out split by construction: a question's side is a stable hash of its text.

A held-out set drawn from "the same generator with another seed" shares most of its questions
with the training pool when the question space is small (gcd of two numbers up to 30 has 900
questions; 199 of 200 such held-out questions were in a 10,000-question training pool). Here
each question goes to one side by the SHA-256 of its normalised text, whatever the seed, the
size or the source that produced it:

    side_of(q) == "held_out"  iff  sha256(normalize_question(q)) / 2**64 < held_out_fraction

so no question can be on both sides. Training pools draw only "train" questions, evaluators
only "held_out" ones, and a held-out set holds distinct questions: when a generator's question
space is too small to give the asked-for number, `SideIndex` stops with one line that says how
many exist and what to change.

Example:
  >>> side_of("What is 2 + 3?"), side_of("  what is 2 +   3? ")  # same normalised text
  ('train', 'train')
  >>> index = SideIndex(lambda i: f"q{i}", side="held_out", size=3, distinct=True)
  >>> [index[i] for i in range(3)]   # candidate positions whose questions hash held out
  [4, 7, 15]
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

__all__ = [
    "DEFAULT_HELD_OUT_FRACTION",
    "SIDES",
    "SideIndex",
    "check_held_out_fraction",
    "check_side",
    "distinct_questions",
    "duplicate_questions",
    "normalize_question",
    "partition",
    "side_of",
]

# The share of every question space that is held out: 10%, as the issue that introduced the
# split proposed (a 200-question held-out set needs a space of about 2,000 questions).
DEFAULT_HELD_OUT_FRACTION = 0.1
SIDES = ("train", "held_out")
# Candidates drawn per asked-for question before a side is declared too small: at a fraction f,
# a side needs about 1/f draws per question; 50x that finds almost every question of a space
# that holds enough (coupon collector) and bounds the scan of one that does not.
DRAWS_PER_QUESTION = 50
_SPACE = re.compile(r"\s+")


def normalize_question(text: str) -> str:
    """The text a question's side is hashed from: case-folded, whitespace collapsed, stripped.

    Example:
      >>> normalize_question("  Find the GCD of\\n12, 18. ")
      'find the gcd of 12, 18.'
    """
    return _SPACE.sub(" ", text).strip().casefold()


def check_side(side: str, *, field: str = "split") -> str:
    """`side` if it is "train" or "held_out", else a ValueError naming `field`.

    Example:
      >>> check_side("held_out")
      'held_out'
    """
    if side not in SIDES:
        raise ValueError(f"{field}={side!r} must be one of {SIDES}.")
    return side


def check_held_out_fraction(fraction: float, *, field: str = "held_out_fraction") -> float:
    """`fraction` if it lies in (0, 1), else a ValueError naming `field` and the fix.

    Example:
      >>> check_held_out_fraction(0.1, field="config.task.held_out_fraction")
      0.1
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(
            f"{field}={fraction} must lie strictly between 0 and 1 (the share of questions held "
            f"out; default {DEFAULT_HELD_OUT_FRACTION})."
        )
    return float(fraction)


def side_of(question: str, *, held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION) -> str:
    """ "held_out" or "train": the side of `question`, fixed by the hash of its normalised text.

    Args:
      question: the question text as shown to the model (before the chat template).
      held_out_fraction: the share of all questions that is held out, in (0, 1).

    Returns:
      "held_out" when the first 8 bytes of SHA-256(normalize_question(question)), read as an
      unsigned integer over 2**64, fall below `held_out_fraction`; else "train". The same on
      every machine and Python process (unlike `hash`).

    Example:
      >>> [side_of(f"q{i}") for i in range(5)]
      ['train', 'train', 'train', 'train', 'held_out']
    """
    check_held_out_fraction(held_out_fraction)
    digest = hashlib.sha256(normalize_question(question).encode("utf-8")).digest()
    position = int.from_bytes(digest[:8], "big") / 2.0**64
    return "held_out" if position < held_out_fraction else "train"


def distinct_questions(questions: Iterable[str]) -> int:
    """How many different normalised texts `questions` holds.

    Example:
      >>> distinct_questions(["What is 2 + 3?", "what is 2 +  3?", "What is 3 + 2?"])
      2
    """
    return len({normalize_question(q) for q in questions})


def duplicate_questions(questions: Sequence[str]) -> list[tuple[int, int]]:
    """(first position, repeat position) of every question whose normalised text came before.

    Example:
      >>> duplicate_questions(["a?", "b?", "A? "])
      [(0, 2)]
    """
    first: dict[str, int] = {}
    repeats = []
    for position, question in enumerate(questions):
        key = normalize_question(question)
        if key in first:
            repeats.append((first[key], position))
        else:
            first[key] = position
    return repeats


def partition(
    items: Sequence[T],
    question_of: Callable[[T], str],
    *,
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
) -> tuple[list[T], list[T]]:
    """(train items, held-out items) of a finite collection, by the side of each one's question.

    Example:
      >>> train, held_out = partition(records, lambda r: r.prompt)
    """
    sides: dict[str, list[T]] = {side: [] for side in SIDES}
    for item in items:
        sides[side_of(question_of(item), held_out_fraction=held_out_fraction)].append(item)
    return sides["train"], sides["held_out"]


class SideIndex:
    """Positions on one side of the split, resolved lazily from a stream of candidates.

    Position `i` of the side is the candidate index of the i-th candidate question (in order)
    on `side`; with `distinct`, questions already taken are skipped. Candidates are scanned
    only as far as the highest position asked for, so a 10,000-question training pool costs
    nothing until its batches are drawn.

    Args:
      question_at: candidate index -> question text (e.g. the reasoning-gym entry's question).
      side: "train" or "held_out".
      size: the positions the side must provide.
      held_out_fraction: as in `side_of`.
      distinct: skip a question whose normalised text was taken already (held-out sets).
      max_candidates: the most candidates scanned (default `DRAWS_PER_QUESTION * size / share`
        with share the side's fraction, and at least 10,000).
      describe: how the error names the source and its fix, e.g. "task 'gcd' {...}".
      size_field: the config field the error tells the user to lower.

    Raises:
      ValueError: on the first position that cannot be found, or from `resolve_all`: the side
        holds fewer than `size` (distinct) questions among `max_candidates` candidates; the
        message says how many it found and what to change.
    """

    def __init__(
        self,
        question_at: Callable[[int], str],
        *,
        side: str,
        size: int,
        held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
        distinct: bool = False,
        max_candidates: int | None = None,
        describe: str = "the source",
        size_field: str = "size",
    ):
        self.side = check_side(side)
        self.fraction = check_held_out_fraction(held_out_fraction)
        if size <= 0:
            raise ValueError(f"{size_field}={size} must be positive.")
        share = self.fraction if side == "held_out" else 1.0 - self.fraction
        if max_candidates is None:
            max_candidates = max(10_000, int(DRAWS_PER_QUESTION * size / share))
        self.question_at, self.size, self.distinct = question_at, size, distinct
        self.max_candidates, self.describe, self.size_field = max_candidates, describe, size_field
        self._positions: list[int] = []
        self._seen: set[str] = set()
        self._next_candidate = 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, position: int) -> int:
        """The candidate index of `position` (0 <= position < size)."""
        if not 0 <= position < self.size:
            raise IndexError(f"position {position} out of range for a side of size {self.size}")
        while len(self._positions) <= position:
            self._scan_one()
        return self._positions[position]

    def resolve_all(self) -> list[int]:
        """Every position's candidate index (scans until the side is full, or raises)."""
        return [self[i] for i in range(self.size)]

    def _scan_one(self) -> None:
        while self._next_candidate < self.max_candidates:
            candidate = self._next_candidate
            self._next_candidate += 1
            question = self.question_at(candidate)
            if side_of(question, held_out_fraction=self.fraction) != self.side:
                continue
            if self.distinct:
                key = normalize_question(question)
                if key in self._seen:
                    continue
                self._seen.add(key)
            self._positions.append(candidate)
            return
        found = len(self._positions)
        what = "distinct questions" if self.distinct else "questions"
        raise ValueError(
            f"{self.size_field}={self.size} asks for {self.size} {what} on the {self.side} side "
            f"of {self.describe}, but {self.max_candidates:,} draws gave only {found} "
            f"({100 * self.fraction:g}% of questions are held out, by hash). Lower "
            f"{self.size_field} to at most {found}, or widen the question space (a larger "
            f"range in config.task.kwargs), or change config.task.held_out_fraction."
        )
