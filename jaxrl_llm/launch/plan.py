"""A sweep's plan: each trial's config validated, its workdir and its exact command line.

    trials = plan("experiments/configs/grpo_tiny.py", axis("seed", [0, 1]), "runs/seeds",
                  base={"train.num_steps": 2})
    write_plan("runs/seeds", "experiments/configs/grpo_tiny.py", trials)   # sweep.json
    trials[0].argv     # ("python", "-m", "jaxrl_llm.main", "--config", ..., "--config.seed=0")

A trial is `python -m jaxrl_llm.main ...` in its own workdir; `is_finished` tells a trial whose
`summary.json` records the configured steps, which a launch reuses instead of rerunning. The
backends that run the trials are in `jaxrl_llm.launch.backends`, the command line in
`jaxrl_llm.launch.cli`.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from jaxrl_llm import sweeps as sweeps_lib
from jaxrl_llm.user_imports import import_all

__all__ = [
    "Trial",
    "flag_value",
    "is_finished",
    "parse_value",
    "plan",
    "trial_command",
    "write_plan",
]


@dataclasses.dataclass(frozen=True)
class Trial:
    """One planned run of a sweep.

    Attributes:
      index: position in the sweep.
      name: directory name (`003_advantage=rloo`).
      overrides: the sweep's dict for this trial (config keys and `gin/` bindings).
      workdir: the run directory.
      argv: the full command line.
      num_steps: the configured RL steps (a finished trial's summary.json records them).
    """

    index: int
    name: str
    overrides: dict[str, Any]
    workdir: str
    argv: tuple[str, ...]
    num_steps: int | None = None


def flag_value(value: Any) -> str:
    """A config value as `--config.a.b=` expects it (strings raw, bools lower-case, floats exact)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return repr(value)


def parse_value(text: str) -> Any:
    """`--set key=value` values: a Python literal (1, 0.5, True, 'x', (1, 2)) or else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def trial_command(
    config_path: str,
    workdir: str,
    overrides: Mapping[str, Any],
    *,
    gin_files: Sequence[str] = (),
    gin_bindings: Sequence[str] = (),
    python: str | None = None,
    imports: Sequence[str] = (),
) -> list[str]:
    """The `python -m jaxrl_llm.main` command line of one trial (shared gin first, trial's after;
    `imports`: `--import` modules, before the config)."""
    config_overrides, trial_bindings = sweeps_lib.split(overrides)
    if python and os.sep in python:
        python = os.path.abspath(python)  # trials may start elsewhere (XManager's shell)
    argv = [
        python or sys.executable,
        "-m",
        "jaxrl_llm.main",
        *[f"--import={name}" for name in imports],
        "--config",
        os.path.abspath(config_path),
    ]
    argv += ["--workdir", os.path.abspath(workdir), "--no_progress"]
    argv += [f"--config.{k}={flag_value(v)}" for k, v in config_overrides.items()]
    argv += [f"--gin_file={os.path.abspath(f)}" for f in gin_files]
    argv += [f"--gin_bindings={b}" for b in [*gin_bindings, *trial_bindings]]
    return argv


def plan(
    config_path: str,
    trials: Sequence[Mapping[str, Any]],
    sweep_dir: str,
    *,
    base: Mapping[str, Any] | None = None,
    gin_files: Sequence[str] = (),
    gin_bindings: Sequence[str] = (),
    python: str | None = None,
    imports: Sequence[str] = (),
) -> list[Trial]:
    """Validates every trial's config and lays the sweep out under `sweep_dir`.

    Args:
      config_path: the experiment's config file (`get_config()`).
      trials: the sweep, a list of override dicts.
      sweep_dir: parent of the trials' workdirs.
      base: config overrides shared by all trials (a trial's own value wins).
      gin_files, gin_bindings: gin configuration shared by all trials.
      python: the interpreter that runs trials (default: this one).
      imports: `--import` modules every trial imports first (imported here too, before the
        trials' configs are checked: `jaxrl_llm.user_imports`).

    Returns:
      The trials, in sweep order.
    """
    imports = import_all(imports)
    base = dict(base or {})
    configs = sweeps_lib.check_trials(config_path, trials, base)
    planned = []
    for i, (overrides, config) in enumerate(zip(trials, configs, strict=True)):
        merged = {**base, **overrides}
        name = sweeps_lib.trial_name(i, overrides)
        workdir = os.path.abspath(os.path.join(sweep_dir, name))
        argv = trial_command(
            config_path,
            workdir,
            merged,
            gin_files=gin_files,
            gin_bindings=gin_bindings,
            python=python,
            imports=imports,
        )
        planned.append(
            Trial(i, name, dict(overrides), workdir, tuple(argv), config.train.num_steps)
        )
    return planned


def write_plan(sweep_dir: str, config_path: str, trials: Sequence[Trial], **extra: Any) -> str:
    """Writes `sweep_dir/sweep.json` (what `jaxrl_llm.plots` reads to label a sweep's trials)."""
    os.makedirs(sweep_dir, exist_ok=True)
    path = os.path.join(sweep_dir, "sweep.json")
    payload = {
        "config": os.path.abspath(config_path),
        **extra,
        "trials": [
            {
                "index": t.index,
                "name": t.name,
                "overrides": t.overrides,
                "workdir": t.workdir,
                "command": shlex.join(t.argv),
            }
            for t in trials
        ],
    }
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=repr)
    return path


def is_finished(trial: Trial) -> bool:
    """True when the trial's summary.json records its configured number of steps, or a stop
    its config asked for ("ended_early": the reward-model check); a run stopped by a signal or
    a crash is unfinished (rerunning it resumes it)."""
    path = os.path.join(trial.workdir, "summary.json")
    if trial.num_steps is None or not os.path.exists(path):
        return False
    with open(path) as f:
        summary = json.load(f)
    return summary.get("steps") == trial.num_steps or "ended_early" in summary
