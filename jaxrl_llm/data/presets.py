"""Task presets: a name selects a reasoning-gym generator and the keyword arguments that size it.

reasoning-gym's generators default to problems far beyond a 135M model (gcd of numbers up to 1000,
products of five-digit numbers). A preset picks a size where a small instruction-tuned model
starts between a few and about sixty percent, so RL has something to learn, and spares the user
each generator's keyword names. Each preset's problem space holds over 2,000 problems counted
by problem key (`jaxrl_llm.data.problem_keys`: gcd(12, 18) and gcd(18, 12) are one), so its
test and selection sides (10% each, by hash of the key; `jaxrl_llm.data.split`) give 200
distinct problems each, with at least 10% to spare (gcd and lcm of two numbers up to 67: 2,278
pairs, 239 test and 220 selection; simple_equations with numbers up to 28: 2,352 equations, 220
and 260; count_bits below 4096: 415 and 425). Split by text, gcd up to 60 had looked big enough
(3,600 questions), but by key it holds 1,830 problems and 189 test ones; lcm up to 50, 1,275;
simple_equations up to 10, 300 (26 letters and three wordings made 21,000 texts of them):

    --config.task.name=gcd                                  # the "gcd" preset
    --config.task.name=gcd --config.task.kwargs="{'max_value': 90}"   # the preset, one field changed

`resolve_task(name, overrides)` gives (reasoning-gym task, kwargs): the preset's kwargs updated
with `overrides`; a reasoning-gym task without a preset runs with its generator's defaults plus
the overrides. SmolLM2-135M-Instruct's greedy accuracy on the presets before training is in
docs/recipe.md (200 held-out prompts, 32 new tokens).

`register_preset(name, TaskPreset(task, kwargs, description))` adds a preset from outside (a
notebook, a research repo), with no edit here; `PRESETS` is a read-only view of all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from reasoning_gym.factory import DATASETS

from jaxrl_llm.data.problem_keys import problem_key_for
from jaxrl_llm.data.reasoning_gym_source import ReasoningGymSource, close_matches, task_fields
from jaxrl_llm.data.split import (
    DEFAULT_HELD_OUT_FRACTION,
    DEFAULT_SELECTION_FRACTION,
    check_side,
)
from jaxrl_llm.data.user_data import user_pool, uses_user_data

__all__ = [
    "PRESETS",
    "STEP_INSTRUCTION",
    "TaskPreset",
    "register_preset",
    "resolve_task",
    "task_names",
    "task_pool",
    "task_source",
]

# The `config.task.instruction_suffix` asking "chain_sum_steps" answers for one operation a
# line, so a process reward model has steps to score and a policy can repeat one
# (experiments/configs/ppo_prm_steps_smollm2.py; 1.7 million questions). SmolLM2-135M-Instruct
# alone follows it poorly: 64 samples at temperature 0.7 had 1.5 steps on average (33% more
# than one line) and 2% right answers; hence the SFT stage on worked solutions
# (`jaxrl_llm.data.sft.STEPS_RESPONSE_TEMPLATE`) before the process reward model and RL.
STEP_INSTRUCTION = (
    "\nWork it out one operation per line, then write 'The answer is N.' on the last line."
)


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


# The presets by name; `register_preset` adds more (`PRESETS` is a read-only view of them).
_PRESETS: dict[str, TaskPreset] = {
    "chain_sum": TaskPreset(
        "chain_sum",
        dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2),
        "a + b or a - b, one or two digits each",
    ),
    "gcd": TaskPreset(
        "gcd",
        dict(min_numbers=2, max_numbers=2, min_value=1, max_value=67),
        "greatest common divisor of two numbers up to 67",
    ),
    "lcm": TaskPreset(
        "lcm",
        dict(min_numbers=2, max_numbers=2, min_value=1, max_value=67),
        "least common multiple of two numbers up to 67",
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
            max_value=28,
            operators=("+", "-"),
            operators_weights=(0.5, 0.5),
        ),
        "solve a one-step linear equation, numbers up to 28",
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
        dict(min_n=1, max_n=4095),
        "1 bits in a number below 4096",
    ),
    "chain_sum_steps": TaskPreset(
        "chain_sum",
        dict(min_terms=4, max_terms=5, min_digits=1, max_digits=1),
        "four or five one-digit terms with + and -: three or four operations, one a line "
        "with STEP_INSTRUCTION (process reward models' steps)",
    ),
}
PRESETS: Mapping[str, TaskPreset] = MappingProxyType(_PRESETS)


def register_preset(name: str, preset: TaskPreset) -> TaskPreset:
    """Makes `name` a task preset (`config.task.name`); again with the same name replaces it.

    The generator must be a reasoning-gym task: a built-in one, or one added with
    reasoning-gym's own `reasoning_gym.factory.register_dataset`.

    Raises:
      ValueError: `preset.task` is not a reasoning-gym task, or a kwarg is not its field.

    Example:
      >>> register_preset("gcd_small", TaskPreset("gcd", {"max_value": 20}, "gcd up to 20"))
    """
    if preset.task not in DATASETS:
        raise ValueError(
            f"register_preset({name!r}): {preset.task!r} is not a reasoning-gym task."
            f"{close_matches(preset.task, sorted(DATASETS), n=3)}"
        )
    unknown = sorted(set(preset.kwargs) - set(task_fields(preset.task)))
    if unknown:
        raise ValueError(
            f"register_preset({name!r}): reasoning-gym task {preset.task!r} takes no {unknown}."
        )
    _PRESETS[name] = preset
    return preset


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
    name: str,
    *,
    seed: int,
    size: int,
    overrides: Mapping[str, Any] | None = None,
    split: str | None = None,
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
    split_by: str = "problem",
    size_field: str = "size",
) -> ReasoningGymSource:
    """A `ReasoningGymSource` of `size` examples of preset or task `name` (see `resolve_task`).

    Args:
      name, overrides: as in `resolve_task`.
      seed, size: the generator's seed and the examples wanted.
      split: None (every generated question), "train", "selection" or "test" ("held_out" is
        "test"): only that side of the hash split, distinct problems on the selection and test
        sides (`jaxrl_llm.data.split`).
      held_out_fraction, selection_fraction: the test and selection sides' shares.
      split_by: "problem" (the key of `problem_key_for(name)`, else of the preset's task) or
        "text" (the question).
      size_field: the config field named when the side is too small (e.g. "config.task.eval_size").

    Example:
      >>> task_source("gcd", seed=0, size=100, split="train")   # gcd of two numbers up to 67
    """
    task, kwargs = resolve_task(name, overrides)
    return ReasoningGymSource(
        task,
        seed=seed,
        size=size,
        split=split,
        held_out_fraction=held_out_fraction,
        selection_fraction=selection_fraction,
        split_by=split_by,
        problem_key=problem_key_for(name),
        size_field=size_field,
        **kwargs,
    )


def task_pool(
    task_section: Any,
    *,
    side: str,
    seed: int | None = None,
    name: str | None = None,
    size: int | None = None,
    eval_seed: int | None = None,
):
    """One side of a run's task: its training pool, its selection set or its test set.

    Args:
      task_section: a run config's `task` section (name, kwargs, train_size, eval_size,
        eval_seed, held_out_fraction, selection_fraction, split_by; a section written before
        the last three existed gets their defaults).
      side: "train": `train_size` problems of the train side, drawn with `seed`; "selection"
        or "test" ("held_out" is "test"): `eval_size` distinct problems of that side, drawn
        with `eval_seed` (the same set whatever the run's seed).
      seed: the training pool's seed (the run's `config.seed`); unused for the other sides.
      name: another task than `task_section.name` (it then runs with its preset's fields).
      size: problems wanted, instead of the section's `train_size` / `eval_size`.
      eval_seed: the evaluation draw's seed, instead of the section's `eval_seed`.

    Returns:
      A `ReasoningGymSource` on that side of the hash split (`jaxrl_llm.data.split`); with
      `task_section.data.train` set (and `name` the run's task), a list of the user's
      examples on that side instead (`jaxrl_llm.data.user_data.user_pool`).

    Raises:
      ValueError: the side holds too few problems (names `config.task.eval_size` or
        `config.task.train_size`, how many exist and what to change).

    Example:
      >>> pool = task_pool(config.task, side="train", seed=config.seed)
      >>> selection = task_pool(config.task, side="selection")  # choosing recipes, pruning
      >>> test = task_pool(config.task, side="test")            # reported figures
    """
    own = name is None or name == task_section.name
    if own and uses_user_data(task_section):  # config.task.data: the user's rows
        return user_pool(task_section, side=side, seed=seed, size=size, eval_seed=eval_seed)
    kwargs = task_section.kwargs
    overrides = (kwargs.to_dict() if hasattr(kwargs, "to_dict") else dict(kwargs)) if own else None
    side = check_side(side, field="task_pool side")
    evaluated = side != "train"
    if evaluated:
        seed = task_section.eval_seed if eval_seed is None else eval_seed
    if size is None:
        size = task_section.eval_size if evaluated else task_section.train_size
    return task_source(
        task_section.name if name is None else name,
        seed=seed,
        size=size,
        overrides=overrides,
        split=side,
        held_out_fraction=task_section.get("held_out_fraction", DEFAULT_HELD_OUT_FRACTION),
        selection_fraction=task_section.get("selection_fraction", DEFAULT_SELECTION_FRACTION),
        split_by=task_section.get("split_by", "problem"),
        size_field=f"config.task.{'eval_size' if evaluated else 'train_size'}",
    )
