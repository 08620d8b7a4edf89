"""Prompts from reasoning-gym's procedural generators: offline, seeded, scored by the task itself.

reasoning-gym (0.1.25 has 106 tasks) builds entry `i` of a dataset from `Random(seed + i)`, so
`ReasoningGymSource(task, seed=s, size=n)[i]` is the same on every machine and every run. With
`split="train"`, "selection" or "test" the source keeps only the entries on that side of the
hash split (`jaxrl_llm.data.split`), hashed by each entry's problem key
(`jaxrl_llm.data.problem_keys`), so a training pool, a selection set and a test set never share
a problem whatever their seeds and sizes; selection and test sets also hold distinct problems.
A task without a key function is split by its question text, with one warning.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Iterator
from typing import Any

import reasoning_gym
from reasoning_gym.factory import DATASETS

from jaxrl_llm.data.example import Example
from jaxrl_llm.data.problem_keys import ProblemKey, problem_key_for
from jaxrl_llm.data.split import (
    DEFAULT_HELD_OUT_FRACTION,
    DEFAULT_SELECTION_FRACTION,
    SideIndex,
    check_side,
    check_split_by,
)

__all__ = ["ReasoningGymSource", "reasoning_gym_tasks"]

# Tasks already warned about splitting by question text (one line per task and process).
_WARNED_TEXT_SPLIT: set[str] = set()


def reasoning_gym_tasks() -> list[str]:
    """Names of the reasoning-gym tasks installed, sorted.

    Example:
      >>> "chain_sum" in reasoning_gym_tasks(), len(reasoning_gym_tasks())  # reasoning-gym 0.1.25
      (True, 106)
    """
    return sorted(DATASETS)


def task_fields(task: str) -> set[str]:
    """The generator fields of installed reasoning-gym task `task` (its config dataclass's,
    without seed and size), which `ReasoningGymSource` accepts as keyword arguments."""
    return {f.name for f in dataclasses.fields(DATASETS[task][1])} - {"seed", "size"}


def close_matches(name: str, candidates, n: int = 5) -> str:
    """The hint ` Did you mean 'a', 'b'?` naming the `candidates` close to `name`, or ""."""
    matches = difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.5)
    return f" Did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""


class ReasoningGymSource:
    """A fixed-size, deterministic prompt source over one reasoning-gym task.

    Args:
      task: reasoning-gym task name, e.g. "chain_sum", "basic_arithmetic", "gsm_symbolic".
      seed: generator seed; the same (task, seed, kwargs) always gives the same examples.
      size: number of examples.
      split: None keeps every generated entry; "train", "selection" or "test" ("held_out" is
        "test") keeps only the entries whose key lies on that side of the hash split
        (`jaxrl_llm.data.split.side_of`), in generation order: entry i is then the i-th such
        entry of the generator's stream.
      held_out_fraction, selection_fraction: the test and selection sides' shares.
      split_by: "problem" hashes each entry's problem key (`problem_key`, else the task's
        registered one); "text" its question. A task without a key is split by text, with one
        warning line.
      problem_key: entry -> key, instead of `problem_key_for(task)`.
      distinct: skip entries whose key was already kept (default: True for "selection" and
        "test").
      size_field: the config field that set `size`, named in errors.
      **task_kwargs: fields of the task's config dataclass, e.g. for chain_sum `min_terms`,
        `max_terms`, `min_digits`, `max_digits`, `allow_negation`.

    Raises:
      ValueError: unknown task (the message lists close names), unknown config field (names it and
        lists the accepted ones), a config the task rejects, or a side of the split too small
        for `size` (distinct) questions (the message says how many exist and what to change).

    Example:
      >>> source = ReasoningGymSource("chain_sum", seed=1, size=5, max_terms=3, max_digits=1)
      >>> ex = source[0]
      >>> ex.question
      'State the final answer to the following arithmetic problem: 4 - 1 ='
      >>> ex.answer, ex.score("3"), ex.score("5")
      ('3', 1.0, 0.0)
    """

    def __init__(
        self,
        task: str,
        *,
        seed: int,
        size: int,
        split: str | None = None,
        held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
        selection_fraction: float = DEFAULT_SELECTION_FRACTION,
        split_by: str = "problem",
        problem_key: ProblemKey | None = None,
        distinct: bool | None = None,
        size_field: str = "size",
        **task_kwargs: Any,
    ):
        if task not in DATASETS:
            raise ValueError(
                f"Unknown reasoning-gym task {task!r}.{close_matches(task, DATASETS)} "
                f"{len(DATASETS)} tasks are installed; see `reasoning_gym_tasks()`."
            )
        if size <= 0:
            raise ValueError(f"ReasoningGymSource: {size_field}={size} must be positive.")
        config_cls = DATASETS[task][1]
        fields = task_fields(task)
        for key in task_kwargs:
            if key not in fields:
                raise ValueError(
                    f"reasoning-gym task {task!r} has no config field {key!r}.{close_matches(key, fields)} "
                    f"Accepted fields of {config_cls.__name__}: {', '.join(sorted(fields))}."
                )
        self.split, self._side = split, None
        self._key = self._problem_key(task, check_split_by(split_by), problem_key)
        candidates = size
        if split is not None:
            side = check_side(split)
            self._side = SideIndex(
                self._key_at,  # a bound method: the source stays picklable
                side=side,
                size=size,
                held_out_fraction=held_out_fraction,
                selection_fraction=selection_fraction,
                distinct=side != "train" if distinct is None else distinct,
                describe=f"reasoning-gym task {task!r} {task_kwargs}",
                size_field=size_field,
                unit="questions" if self._key is None else "problems",
            )
            candidates = self._side.max_candidates
        try:
            self._dataset = reasoning_gym.create_dataset(
                task, seed=seed, size=candidates, **task_kwargs
            )
        except (AssertionError, ValueError, TypeError) as e:
            raise ValueError(
                f"reasoning-gym rejected the config of task {task!r} "
                f"(seed={seed}, size={size}, {task_kwargs}): {type(e).__name__}: {e}"
            ) from e
        self.task, self.seed, self.size = task, seed, size
        self.task_kwargs = dict(task_kwargs)
        if self._side is not None and self._side.distinct:
            self._side.resolve_all()  # fail now, not mid-run: a distinct set is found whole
        elif self._side is not None:
            self._side[0]  # a side with no question at all fails now too

    def __len__(self) -> int:
        return self.size

    @staticmethod
    def _problem_key(task: str, split_by: str, problem_key: ProblemKey | None):
        """The key function the split hashes, or None for the question text."""
        if split_by == "text":
            return None
        key = problem_key or problem_key_for(task)
        if key is None and task not in _WARNED_TEXT_SPLIT:
            _WARNED_TEXT_SPLIT.add(task)
            logging.getLogger(__name__).warning(
                "reasoning-gym task %r has no problem key (jaxrl_llm.data.problem_keys); its "
                "split by problem falls back to the question text (register one with "
                "register_problem_key, or set config.task.split_by='text').",
                task,
            )
        return key

    def _key_at(self, candidate: int) -> str:
        """The problem key (or question) of generator entry `candidate`: what the split hashes."""
        entry = self._dataset[candidate]
        return entry["question"] if self._key is None else self._key(entry)

    def key_of(self, index: int) -> str:
        """The key the split hashed for example `index`: its problem key, or its question.

        Example:
          >>> ReasoningGymSource("gcd", seed=0, size=2, max_value=60).key_of(0)
          '26 59'
        """
        if not -self.size <= index < self.size:
            raise IndexError(f"index {index} out of range for {self!r} of size {self.size}")
        index %= self.size
        return self._key_at(index if self._side is None else self._side[index])

    def __getitem__(self, index: int) -> Example:
        """The example at `index` (negative indices count from the end)."""
        if not -self.size <= index < self.size:
            raise IndexError(f"index {index} out of range for {self!r} of size {self.size}")
        index %= self.size
        entry = self._dataset[index if self._side is None else self._side[index]]
        return Example(
            question=entry["question"],
            answer=str(entry["answer"]),
            source=self.task,
            index=index,
            metadata=entry,
            scorer=self._score,
        )

    def __iter__(self) -> Iterator[Example]:
        return (self[i] for i in range(self.size))

    def _score(self, candidate: str, example: Example) -> float:
        return self._dataset.score_answer(candidate, example.metadata)

    def __repr__(self) -> str:
        kwargs = "".join(f", {k}={v!r}" for k, v in self.task_kwargs.items())
        split = "" if self.split is None else f", split={self.split!r}"
        return (
            f"ReasoningGymSource({self.task!r}, seed={self.seed}, size={self.size}{split}{kwargs})"
        )
