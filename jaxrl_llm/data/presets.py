"""Task presets: a name selects a reasoning-gym generator and the keyword arguments that size it.

reasoning-gym's generators default to problems far beyond a 135M model (gcd of numbers up to 1000,
products of five-digit numbers). A preset picks a size where a small instruction-tuned model
starts between a few and about sixty percent, so RL has something to learn, and spares the user
each generator's keyword names:

    --config.task.name=gcd                                  # the "gcd" preset
    --config.task.name=gcd --config.task.kwargs="{'max_value': 60}"   # the preset, one field changed

`resolve_task(name, overrides)` gives (reasoning-gym task, kwargs): the preset's kwargs updated
with `overrides`; a reasoning-gym task without a preset runs with its generator's defaults plus
the overrides. SmolLM2-135M-Instruct's greedy accuracy on the presets before training is in
docs/recipe.md (200 held-out prompts, 32 new tokens).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from reasoning_gym.factory import DATASETS

from jaxrl_llm.data.reasoning_gym_source import ReasoningGymSource, close_matches, task_fields

__all__ = ["PRESETS", "TaskPreset", "resolve_task", "task_names", "task_source"]


@dataclasses.dataclass(frozen=True)
class TaskPreset:
    """A named problem size of one reasoning-gym generator.

    Attributes:
      task: the reasoning-gym task name.
      kwargs: keyword arguments of its config dataclass.
      description: what the problems look like, for listings.
    """

    task: str
    kwargs: Mapping[str, Any]
    description: str


PRESETS: Mapping[str, TaskPreset] = MappingProxyType(
    {
        "chain_sum": TaskPreset(
            "chain_sum",
            dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2),
            "a + b or a - b, one or two digits each",
        ),
        "gcd": TaskPreset(
            "gcd",
            dict(min_numbers=2, max_numbers=2, min_value=1, max_value=30),
            "greatest common divisor of two numbers up to 30",
        ),
        "lcm": TaskPreset(
            "lcm",
            dict(min_numbers=2, max_numbers=2, min_value=1, max_value=12),
            "least common multiple of two numbers up to 12",
        ),
        "products": TaskPreset(
            "products",
            dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2),
            "product of two numbers of one or two digits",
        ),
        "basic_arithmetic": TaskPreset(
            "basic_arithmetic",
            dict(
                min_terms=2,
                max_terms=3,
                min_digits=1,
                max_digits=1,
                operators=("+", "-", "*"),
                allow_parentheses=False,
                allow_negation=False,
            ),
            "two or three one-digit terms with +, - and *",
        ),
        "letter_counting": TaskPreset(
            "letter_counting",
            dict(min_words=1, max_words=4),
            "occurrences of a letter in one to four words",
        ),
        "simple_equations": TaskPreset(
            "simple_equations",
            dict(
                min_terms=2,
                max_terms=2,
                min_value=1,
                max_value=10,
                operators=("+", "-"),
                operators_weights=(0.5, 0.5),
            ),
            "solve a one-step linear equation with small numbers",
        ),
        "decimal_chain_sum": TaskPreset(
            "decimal_chain_sum",
            dict(
                min_terms=2,
                max_terms=2,
                min_digits=1,
                max_digits=1,
                min_decimal_places=1,
                max_decimal_places=1,
            ),
            "sum or difference of two numbers with one decimal place",
        ),
        "count_bits": TaskPreset(
            "count_bits",
            dict(min_n=1, max_n=31),
            "1 bits in a number below 32",
        ),
    }
)


def task_names() -> list[str]:
    """Preset names first, then every other installed reasoning-gym task, each once.

    Example:
      >>> task_names()[:3]
      ['chain_sum', 'gcd', 'lcm']
    """
    return list(PRESETS) + sorted(set(DATASETS) - set(PRESETS))


def resolve_task(name: str, overrides: Mapping[str, Any] | None = None) -> tuple[str, dict]:
    """The reasoning-gym task and generator kwargs for a preset or task `name`.

    Args:
      name: a preset name (`PRESETS`) or any reasoning-gym task name.
      overrides: generator fields that replace the preset's (or the generator's defaults).

    Returns:
      (reasoning-gym task name, kwargs for `ReasoningGymSource`).

    Raises:
      ValueError: an unknown name (with close matches) or a field the generator lacks.

    Example:
      >>> resolve_task("gcd", {"max_value": 60})
      ('gcd', {'min_numbers': 2, 'max_numbers': 2, 'min_value': 1, 'max_value': 60})
    """
    overrides = dict(overrides or {})
    preset = PRESETS.get(name)
    if preset is None and name not in DATASETS:
        hint = close_matches(name, task_names(), n=4)
        raise ValueError(
            f"config.task.name={name!r} is neither a task preset nor a reasoning-gym task.{hint} "
            f"Presets: {', '.join(PRESETS)}; every task: jaxrl_llm.data.reasoning_gym_tasks()."
        )
    task = preset.task if preset else name
    kwargs = dict(preset.kwargs) if preset else {}
    fields = task_fields(task)
    for key in overrides:
        if key not in fields:
            raise ValueError(
                f"config.task.kwargs has {key!r}, which reasoning-gym task {task!r} does not "
                f"take.{close_matches(key, fields, n=3)} Its fields: {', '.join(sorted(fields))}."
            )
    kwargs.update(overrides)
    return task, kwargs


def task_source(
    name: str, *, seed: int, size: int, overrides: Mapping[str, Any] | None = None
) -> ReasoningGymSource:
    """A `ReasoningGymSource` of `size` examples of preset or task `name` (see `resolve_task`).

    Example:
      >>> task_source("gcd", seed=0, size=100)   # gcd of two numbers up to 30
    """
    task, kwargs = resolve_task(name, overrides)
    return ReasoningGymSource(task, seed=seed, size=size, **kwargs)
