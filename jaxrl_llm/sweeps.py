"""Sweeps as pure data: lists of override dicts, built with `axis`, `product`, `zipped`, `concat`.

A sweep file `experiments/sweeps/<name>.py` defines `sweep()` returning a list of trials; each
trial is a dict of dotted config overrides (`{"loss.clip_high": 0.28}`, as `apply_overrides`
takes them) and, optionally, gin bindings under keys that start with `gin/`
(`{"gin/format_reward.max_chars": 40}`). Nothing here runs anything (see `jaxrl_llm.launch`), so
a sweep is tested like any list.

Example:
  >>> from jaxrl_llm.sweeps import axis, product, zipped
  >>> product(axis("loss.advantage", ["grpo", "rloo"]),
  ...         zipped(axis("optimizer.learning_rate", [1e-5, 3e-5]), axis("seed", [0, 1])))
  [{'loss.advantage': 'grpo', 'optimizer.learning_rate': 1e-05, 'seed': 0},
   {'loss.advantage': 'grpo', 'optimizer.learning_rate': 3e-05, 'seed': 1},
   {'loss.advantage': 'rloo', 'optimizer.learning_rate': 1e-05, 'seed': 0},
   {'loss.advantage': 'rloo', 'optimizer.learning_rate': 3e-05, 'seed': 1}]
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jaxrl_llm.config import error_line
from jaxrl_llm.config_files import load_module

Trial = dict[str, Any]
GIN_PREFIX = "gin/"


def axis(key: str, values: Sequence[Any]) -> list[Trial]:
    """One trial per value of one key: `axis("seed", [0, 1]) == [{"seed": 0}, {"seed": 1}]`."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"axis({key!r}, ...): values must be a list or tuple, got {values!r}.")
    if not values:
        raise ValueError(f"axis({key!r}, ...): no values.")
    return [{key: value} for value in values]


def fixed(overrides: Mapping[str, Any]) -> list[Trial]:
    """A sweep of one trial, to combine with `product`: `fixed({"train.num_steps": 50})`."""
    return [dict(overrides)]


def _merge(trials: Sequence[Trial]) -> Trial:
    merged: Trial = {}
    for trial in trials:
        clash = sorted(set(merged) & set(trial))
        if clash:
            raise ValueError(f"sweeps: the key(s) {clash} are set by two combined sweeps.")
        merged.update(trial)
    return merged


def product(*sweeps: Sequence[Trial]) -> list[Trial]:
    """The Cartesian product: every combination, the first sweep varying slowest."""
    return [_merge(combo) for combo in itertools.product(*sweeps)]


def zipped(*sweeps: Sequence[Trial]) -> list[Trial]:
    """Trial i of every sweep merged into one: the sweeps must have equal lengths."""
    lengths = [len(s) for s in sweeps]
    if len(set(lengths)) > 1:
        raise ValueError(f"sweeps.zipped: the sweeps have different lengths {lengths}.")
    return [_merge(combo) for combo in zip(*sweeps, strict=True)]


def concat(*sweeps: Sequence[Trial]) -> list[Trial]:
    """The trials of each sweep one after another."""
    return [dict(trial) for sweep in sweeps for trial in sweep]


def with_seeds(trials: Sequence[Trial], seeds: Sequence[int]) -> list[Trial]:
    """Every trial once per seed, the seed varying fastest (a config's seeds finish together,
    so `jaxrl_llm.report` can summarise each group as soon as its last seed ends).

    Raises:
      ValueError: no seeds, or a trial that sets `seed` itself.

    Example:
      >>> with_seeds([{"task.name": "gcd"}], [0, 1])
      [{'task.name': 'gcd', 'seed': 0}, {'task.name': 'gcd', 'seed': 1}]
    """
    if not seeds:
        raise ValueError(
            "with_seeds: the seed list is empty; give at least one, e.g. --seeds 0,1,2 (a "
            "learning figure needs at least 3)."
        )
    return product(trials, axis("seed", list(seeds)))


def parse_seeds(text: str) -> list[int]:
    """The seeds of a command-line list "0,1,2" (or a range "0-4"), in order, without repeats.

    Raises:
      ValueError: naming the bad item and the expected form.
    """
    return parse_int_list(text, flag="--seeds")


def parse_int_list(text: str, *, flag: str) -> list[int]:
    """The integers of a command-line list "0,1,2" with ranges "0-4", in order, without
    repeats (`--seeds`, `launch --only`).

    Raises:
      ValueError: naming `flag`, the bad item and the expected form.
    """
    values_out: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        low, dash, high = item.partition("-")
        try:
            values = range(int(low), int(high) + 1) if dash else [int(item)]
        except ValueError:
            raise ValueError(
                f"{flag} {text!r}: {item!r} is not an integer or a range like 0-4."
            ) from None
        values_out.extend(v for v in values if v not in values_out)
    if not values_out:
        raise ValueError(f"{flag} {text!r} names no number; give e.g. {flag} 0,1,2.")
    return values_out


def split(trial: Mapping[str, Any]) -> tuple[Trial, list[str]]:
    """(config overrides, gin binding strings) of one trial (`gin/` keys become bindings)."""
    overrides = {k: v for k, v in trial.items() if not k.startswith(GIN_PREFIX)}
    bindings = [
        f"{k[len(GIN_PREFIX) :]} = {v!r}" for k, v in trial.items() if k.startswith(GIN_PREFIX)
    ]
    return overrides, bindings


def trial_name(index: int, trial: Mapping[str, Any], *, max_len: int = 60) -> str:
    """A directory name for trial `index`: `003_advantage=rloo_clip_high=0.28` (last key parts)."""
    parts = []
    for key, value in trial.items():
        short = key[len(GIN_PREFIX) :] if key.startswith(GIN_PREFIX) else key
        parts.append(f"{short.split('.')[-1]}={value}")
    slug = re.sub(r"[^A-Za-z0-9_.=+-]+", "-", "_".join(parts)).strip("-")[:max_len]
    return f"{index:03d}_{slug}" if slug else f"{index:03d}"


def load_sweep(path: str) -> list[Trial]:
    """Calls `sweep()` of a sweep file and checks it returns a non-empty list of dicts.

    Raises:
      FileNotFoundError: no such file.
      AttributeError: the file defines no `sweep()`.
      TypeError: a trial is not a dict with string keys.
      ValueError: `sweep()` returned something other than a non-empty list.
    """
    module = load_module(path, kind="sweep")
    if not callable(getattr(module, "sweep", None)):
        raise AttributeError(
            f"{path}: a sweep file must define `sweep()` returning a list of dicts."
        )
    trials = module.sweep()
    if not isinstance(trials, list) or not trials:
        raise ValueError(f"{path}: sweep() must return a non-empty list, got {trials!r}.")
    for i, trial in enumerate(trials):
        if not isinstance(trial, Mapping) or not all(isinstance(k, str) for k in trial):
            raise TypeError(f"{path}: trial {i} must be a dict with string keys, got {trial!r}.")
    return [dict(t) for t in trials]


def check_trials(
    config_path: str, trials: Sequence[Mapping[str, Any]], base: Mapping[str, Any] | None = None
):
    """Applies each trial's config overrides to a fresh config and validates it, before any launch.

    Args:
      config_path: the experiment's config file.
      trials: the sweep.
      base: overrides shared by every trial (applied first; a trial's own value wins).

    Returns:
      The trials' validated configs.

    Raises:
      ValueError: naming the trial, the key and the fix (unknown keys list close matches).
    """
    from jaxrl_llm.stages import load_config

    configs = []
    for i, trial in enumerate(trials):
        overrides, _ = split({**(base or {}), **trial})
        try:
            configs.append(load_config(config_path, overrides))
        except (KeyError, ValueError, TypeError) as e:
            raise ValueError(f"sweep trial {i} {dict(trial)}: {error_line(e)}") from e
    return configs
