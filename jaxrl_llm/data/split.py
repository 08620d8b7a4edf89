"""Train / selection / test split by construction: a problem's side is a stable hash of its key.

A test set drawn from "the same generator with another seed" shares most of its questions with
the training pool when the question space is small (gcd of two numbers up to 30 has 900
questions; 199 of 200 such test questions were in a 10,000-question training pool). Here each
problem goes to one side by the SHA-256 of its key, whatever the seed, the size or the source
that produced it. The key is the problem's canonical form (`jaxrl_llm.data.problem_keys`:
gcd(18, 12) and gcd(12, 18) share one, so do "Solve for x: x + 3 = 5" and "Find y: y + 3 = 5"),
or the normalised question text where a source has no canonical form. With p the first 8 bytes
of SHA-256(normalize_question(key)) read as a fraction of 2**64:

    p < held_out_fraction                             -> "test"       (reported figures)
    p < held_out_fraction + selection_fraction        -> "selection"  (choosing recipes, pruning)
    otherwise                                         -> "train"

so no problem is on two sides. "held_out" is accepted wherever a side is named, as the old name
of "test" (configs and run records written before the selection side existed). Training pools
draw only "train" problems, evaluators "selection" or "test" ones, and an evaluation set holds
distinct problems: when a generator's space is too small to give the asked-for number,
`SideIndex` stops with one line that says how many exist and what to change.

Example:
  >>> side_of("What is 2 + 3?"), side_of("  what is 2 +   3? ")  # same normalised text
  ('train', 'train')
  >>> index = SideIndex(lambda i: f"q{i}", side="test", size=3, distinct=True)
  >>> [index[i] for i in range(3)]   # candidate positions whose keys hash to the test side
  [4, 7, 15]
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")

__all__ = [
    "DEFAULT_HELD_OUT_FRACTION",
    "DEFAULT_SELECTION_FRACTION",
    "SIDES",
    "SIDE_ALIASES",
    "SPLIT_BY",
    "SideIndex",
    "Sides",
    "check_held_out_fraction",
    "check_side",
    "check_side_fractions",
    "check_split_by",
    "distinct_questions",
    "duplicate_questions",
    "empty_side_error",
    "normalize_question",
    "partition",
    "side_of",
    "side_rows",
]

# The test share of every problem space: 10%
# (a 200-problem test set needs a space of about 2,000 problems).
DEFAULT_HELD_OUT_FRACTION = 0.1
# The selection share: as much again, so a recipe can be chosen on 200 problems of its own.
DEFAULT_SELECTION_FRACTION = 0.1
SIDES = ("train", "selection", "test")
# Old side names still accepted, and the side each one means.
SIDE_ALIASES = {"held_out": "test"}
# What `config.task.split_by` may say: hash each problem's canonical key, or its question text.
SPLIT_BY = ("problem", "text")
# Candidates drawn per asked-for question before a side is declared too small: at a fraction f,
# a side needs about 1/f draws per question; 50x that finds almost every question of a space
# that holds enough (coupon collector) and bounds the scan of one that does not.
DRAWS_PER_QUESTION = 50
_SPACE = re.compile(r"\s+")
# The config field that sets each side's share, named when a side is too small.
_FRACTION_FIELD = {
    "test": "config.task.held_out_fraction",
    "selection": "config.task.selection_fraction",
    "train": "config.task.held_out_fraction or config.task.selection_fraction",
}


class Sides(NamedTuple, Generic[T]):
    """The items of a finite collection on each side of the split (`partition`), in order.

    Attributes:
      train: the items trained on.
      selection: the items recipes are chosen on.
      test: the items whose figures are reported (once called "held_out").
    """

    train: list[T]
    selection: list[T]
    test: list[T]


def normalize_question(text: str) -> str:
    """The text a side is hashed from: case-folded, whitespace collapsed, stripped.

    Example:
      >>> normalize_question("  Find the GCD of\\n12, 18. ")
      'find the gcd of 12, 18.'
    """
    return _SPACE.sub(" ", text).strip().casefold()


def check_side(side: str, *, field: str = "split") -> str:
    """The canonical name of `side` ("held_out" gives "test"), else a ValueError naming `field`.

    Example:
      >>> check_side("held_out"), check_side("selection")
      ('test', 'selection')
    """
    side = SIDE_ALIASES.get(side, side)
    if side not in SIDES:
        raise ValueError(
            f"{field}={side!r} must be one of {SIDES} ('held_out' is accepted for 'test')."
        )
    return side


def check_split_by(split_by: str, *, field: str = "config.task.split_by") -> str:
    """`split_by` if it is "problem" or "text", else a ValueError naming `field`."""
    if split_by not in SPLIT_BY:
        raise ValueError(
            f"{field}={split_by!r} must be one of {SPLIT_BY}: 'problem' hashes each problem's "
            "canonical key (jaxrl_llm.data.problem_keys), 'text' its question text."
        )
    return split_by


def check_held_out_fraction(fraction: float, *, field: str = "held_out_fraction") -> float:
    """`fraction` if it lies in (0, 1), else a ValueError naming `field` and the fix.

    Example:
      >>> check_held_out_fraction(0.1, field="config.task.held_out_fraction")
      0.1
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(
            f"{field}={fraction} must lie strictly between 0 and 1 (the share of problems on "
            f"that side; default {DEFAULT_HELD_OUT_FRACTION})."
        )
    return float(fraction)


def check_side_fractions(
    held_out_fraction: float, selection_fraction: float, *, prefix: str = ""
) -> tuple[float, float]:
    """Both shares, each in (0, 1) with a sum below 1, else a ValueError naming the field.

    Args:
      held_out_fraction: the test side's share.
      selection_fraction: the selection side's share.
      prefix: put before the field names in errors, e.g. "config.task.".

    Example:
      >>> check_side_fractions(0.1, 0.1)
      (0.1, 0.1)
    """
    test = check_held_out_fraction(held_out_fraction, field=f"{prefix}held_out_fraction")
    selection = check_held_out_fraction(selection_fraction, field=f"{prefix}selection_fraction")
    if test + selection >= 1.0:
        raise ValueError(
            f"{prefix}held_out_fraction + {prefix}selection_fraction = {test} + {selection} "
            "must be below 1 (the train side gets the rest); lower one of them."
        )
    return test, selection


def side_of(
    key: str,
    *,
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
) -> str:
    """ "train", "selection" or "test": the side of a problem, fixed by the hash of its key.

    Args:
      key: the problem's key (`jaxrl_llm.data.problem_keys`) or its question text as shown to
        the model (before the chat template); both are normalised (`normalize_question`).
      held_out_fraction: the test side's share, in (0, 1).
      selection_fraction: the selection side's share, in (0, 1), with the sum below 1.

    Returns:
      With p the first 8 bytes of SHA-256(normalize_question(key)) over 2**64: "test" when
      p < held_out_fraction, "selection" when p < held_out_fraction + selection_fraction, else
      "train". The same on every machine and Python process (unlike `hash`).

    Example:
      >>> [side_of(f"q{i}") for i in range(5)]
      ['train', 'train', 'train', 'train', 'test']
    """
    check_side_fractions(held_out_fraction, selection_fraction)
    digest = hashlib.sha256(normalize_question(key).encode("utf-8")).digest()
    position = int.from_bytes(digest[:8], "big") / 2.0**64
    if position < held_out_fraction:
        return "test"
    return "selection" if position < held_out_fraction + selection_fraction else "train"


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
    key_of: Callable[[T], str],
    *,
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
) -> Sides[T]:
    """The items of a finite collection on each side, by the side of each one's key.

    Args:
      items: the collection, in order (each side keeps it).
      key_of: item -> its problem key or question text (`side_of`).
      held_out_fraction, selection_fraction: as in `side_of`.

    Example:
      >>> sides = partition(records, lambda r: r.prompt)
      >>> sides.train, sides.selection, sides.test
    """
    sides: dict[str, list[T]] = {side: [] for side in SIDES}
    for item in items:
        side = side_of(
            key_of(item),
            held_out_fraction=held_out_fraction,
            selection_fraction=selection_fraction,
        )
        sides[side].append(item)
    return Sides(**sides)


def side_rows(
    items: Sequence[T],
    key_of: Callable[[T], str],
    *,
    side: str,
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
    describe: str = "the source",
) -> list[T]:
    """The items of a finite collection on `side` (`partition`), in order.

    Raises:
      ValueError: no item lies on that side (names `describe`, the shares and the fix).

    Example:
      >>> side_rows(records, lambda r: r.question, side="selection", describe="data.jsonl")
    """
    side = check_side(side)
    sides = partition(
        items, key_of, held_out_fraction=held_out_fraction, selection_fraction=selection_fraction
    )
    rows = getattr(sides, side)
    if not rows:
        raise empty_side_error(
            describe,
            len(items),
            side=side,
            held_out_fraction=held_out_fraction,
            selection_fraction=selection_fraction,
        )
    return rows


def empty_side_error(
    describe: str,
    count: int,
    *,
    side: str,
    held_out_fraction: float,
    selection_fraction: float,
) -> ValueError:
    """The error of a finite collection with no item on `side`: one line naming `describe`
    (e.g. the file), its `count` items, the shares and the config field to change.

    Example:
      >>> str(empty_side_error("a.jsonl", 3, side="test", held_out_fraction=0.1,
      ...                      selection_fraction=0.1))[:52]
      'a.jsonl: no question of its 3 lies on the test side'
    """
    return ValueError(
        f"{describe}: no question of its {count} lies on the {side} side of the hash "
        f"split ({100 * held_out_fraction:g}% test, {100 * selection_fraction:g}% "
        f"selection). Add examples, or change {_FRACTION_FIELD[side]}."
    )


class SideIndex:
    """Positions on one side of the split, resolved lazily from a stream of candidates.

    Position `i` of the side is the candidate index of the i-th candidate (in order) whose key
    is on `side`; with `distinct`, keys already taken are skipped. Candidates are scanned only
    as far as the highest position asked for, so a 10,000-question training pool costs nothing
    until its batches are drawn.

    Args:
      key_at: candidate index -> the candidate's problem key or question text (`side_of`).
      side: "train", "selection" or "test" ("held_out" means "test").
      size: the positions the side must provide.
      held_out_fraction, selection_fraction: as in `side_of`.
      distinct: skip a candidate whose normalised key was taken already (evaluation sets).
      max_candidates: the most candidates scanned (default `DRAWS_PER_QUESTION * size / share`
        with share the side's fraction, and at least 10,000).
      describe: how the error names the source and its fix, e.g. "task 'gcd' {...}".
      size_field: the config field the error tells the user to lower.
      unit: what a key stands for in errors ("questions", "problems").

    Raises:
      ValueError: on the first position that cannot be found, or from `resolve_all`: the side
        holds fewer than `size` (distinct) keys among `max_candidates` candidates; the message
        says how many it found and what to change.
    """

    def __init__(
        self,
        key_at: Callable[[int], str],
        *,
        side: str,
        size: int,
        held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
        selection_fraction: float = DEFAULT_SELECTION_FRACTION,
        distinct: bool = False,
        max_candidates: int | None = None,
        describe: str = "the source",
        size_field: str = "size",
        unit: str = "questions",
    ):
        self.side = check_side(side)
        self.fraction, self.selection_fraction = check_side_fractions(
            held_out_fraction, selection_fraction
        )
        if size <= 0:
            raise ValueError(f"{size_field}={size} must be positive.")
        share = {
            "test": self.fraction,
            "selection": self.selection_fraction,
            "train": 1.0 - self.fraction - self.selection_fraction,
        }[self.side]
        if max_candidates is None:
            max_candidates = max(10_000, int(DRAWS_PER_QUESTION * size / share))
        self.key_at, self.size, self.distinct = key_at, size, distinct
        self.max_candidates, self.describe, self.size_field = max_candidates, describe, size_field
        self.unit = unit
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
            key = self.key_at(candidate)
            side = side_of(
                key,
                held_out_fraction=self.fraction,
                selection_fraction=self.selection_fraction,
            )
            if side != self.side:
                continue
            if self.distinct:
                key = normalize_question(key)
                if key in self._seen:
                    continue
                self._seen.add(key)
            self._positions.append(candidate)
            return
        found = len(self._positions)
        what = f"distinct {self.unit}" if self.distinct else self.unit
        raise ValueError(
            f"{self.size_field}={self.size} asks for {self.size} {what} on the {self.side} side "
            f"of {self.describe}, but {self.max_candidates:,} draws gave only {found} "
            f"({100 * self.fraction:g}% test, {100 * self.selection_fraction:g}% selection, by "
            f"hash). Lower {self.size_field} to at most {found}, or widen the problem space (a "
            f"larger range in config.task.kwargs), or change {_FRACTION_FIELD[self.side]}."
        )
