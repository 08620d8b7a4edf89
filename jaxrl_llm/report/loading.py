"""The report's input: finished runs read from their directories, grouped by config, and their
records kept in the repository.

Each argument of `python -m jaxrl_llm.report` is a run directory (with `summary.json`), a sweep
directory (its finished trials; unfinished ones are listed and left out; a folder of sweeps or of
`--keep_records` groups: the runs below it) or `LABEL=DIR[,DIR...]`, one explicit group. Runs from
bare directories are grouped by their config minus `seed`; an explicit group whose configs differ
in more than the seed is refused, naming the keys that differ.

    groups = collect_groups(["runs/seeds/main_job", "ppo=runs/d,runs/e,runs/f"])
    keep_records(groups, "docs/reports/runs/algorithms")   # copies RECORD_FILES of each run

`keep_records` copies each run's records (`RECORD_FILES`: the whole input of the report, tens of
kB a run, no checkpoints or samples) to `DIR/<label>/<run name>` for a `LABEL=DIRS` group and
`DIR/<sweep directory name>/<run name>` otherwise, so the report can be regenerated from a
repository after the run directories are gone; a record already there with other content is
refused, nothing copied.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_llm.config import flat_dict
from jaxrl_llm.evals.hacks import EvalAnswers
from jaxrl_llm.evals.scorers import scorer_of_run
from jaxrl_llm.evals.suite import SELECTION_SET
from jaxrl_llm.metrics import read_eval_rows, read_metrics
from jaxrl_llm.report.rules import (
    IGNORED_KEYS,
    config_key,
    differing_keys,
    held_out_curve,
    sampled_entropy,
    with_added_keys,
)

__all__ = [
    "RECORD_FILES",
    "Group",
    "Run",
    "collect_groups",
    "copy_records",
    "keep_records",
    "load_run",
    "record_copies",
]

# What `load_run` reads of a run directory, all that `--keep_records` copies.
RECORD_FILES = ("config.json", "summary.json", "metrics.jsonl", "eval_questions.jsonl")


class Run(NamedTuple):
    """One finished run: its flat config, summary and held-out results per evaluated step.

    Attributes:
      workdir: the run directory.
      config: the config as dotted keys (`task.name`, ...).
      summary: its summary.json.
      curve: {step: held-out accuracy of the run's task}.
      correct: {step: [Q] 0/1 per held-out question}, where the run kept them.
      entropy: {step: mean entropy of the step's sampled tokens (`train/entropy`)}, where logged.
      answers: {step: the held-out answers and copied-input flags (`hacks.EvalAnswers`)}, where
        the run kept them.
      side: the side of the split these figures come from: "test", "selection", or
        "held_out" (the one held-out side of a run made before the selection side existed).
      truncated: {step: [Q] 0/1 whether each greedy completion was cut at the token limit},
        where the run kept them.
    """

    workdir: str
    config: dict[str, Any]
    summary: dict[str, Any]
    curve: dict[int, float]
    correct: dict[int, np.ndarray]
    entropy: dict[int, float]
    answers: dict[int, EvalAnswers]
    side: str = "test"
    truncated: dict[int, np.ndarray] = {}

    @property
    def seed(self) -> int:
        """The run's `config.seed`."""
        return int(self.config.get("seed", 0))

    @property
    def final_step(self) -> int:
        """The last trained step (summary.json's `steps`)."""
        return int(self.summary.get("steps", max(self.curve, default=0)))

    @property
    def scorer(self) -> str:
        """The held-out scorer its figures were measured with (`evals.scorer_of_run`)."""
        return scorer_of_run(
            {
                "eval": {"scorer": self.config.get("eval.scorer")},
                "rewards": {"answer_rule": self.config.get("rewards.answer_rule", "last_number")},
            }
        )


class Group(NamedTuple):
    """Runs that differ only in their seed, under one label (`explicit`: given as LABEL=DIRS)."""

    label: str
    runs: list[Run]
    explicit: bool = False


def load_run(workdir: str, side: str = "test") -> Run:
    """Reads a finished run's figures on one side of the split.

    Args:
      workdir: the run directory.
      side: "test" (the run's own held-out figures, what tables report) or "selection" (its
        evaluation on the selection side, `SELECTION_SET`, what settings are chosen by).

    Raises:
      FileNotFoundError: no summary.json (the run has not finished) or no config.json, each
        with the fix.
      ValueError: a side that is neither.
    """
    if side not in ("test", "selection"):
        raise ValueError(f"report: side={side!r} must be 'test' or 'selection'.")
    summary_path = os.path.join(workdir, "summary.json")
    if not os.path.isfile(summary_path):
        raise FileNotFoundError(
            f"report: {workdir} has no summary.json: the run has not finished (or this is not a "
            "run directory). Finish or resume it (rerun its command or sweep), or leave it out."
        )
    config_path = os.path.join(workdir, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"report: {workdir} has summary.json but no config.json.")
    with open(summary_path) as f:
        summary = json.load(f)
    with open(config_path) as f:
        config = with_added_keys(flat_dict(json.load(f)))
    set_name = config.get("task.name") if side == "test" else SELECTION_SET
    metrics = read_metrics(workdir)
    curve = held_out_curve(metrics, side)
    entropy = sampled_entropy(metrics)
    rows = {step: row for (step, name), row in read_eval_rows(workdir).items() if name == set_name}
    correct = {step: np.asarray(row["correct"], np.int8) for step, row in rows.items()}
    truncated = {
        step: np.asarray(row["truncated"], np.int8)
        for step, row in rows.items()
        if "truncated" in row
    }
    answers = {
        step: EvalAnswers(
            row["answers"],
            correct[step],
            np.asarray(row["copied_input"], np.int8),
            row.get("references"),  # kept since 2026-11-27
        )
        for step, row in rows.items()
        if "answers" in row and "copied_input" in row
    }
    if side == "test" and "task.selection_fraction" not in config:
        side = "held_out"  # made before the three-way split: one held-out side
    return Run(workdir, config, summary, curve, correct, entropy, answers, side, truncated)


def _run_dirs(path: str) -> tuple[list[str], list[str]]:
    """(finished run dirs, unfinished run dirs) of a run or sweep directory."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"report: no such directory: {path!r}.")
    if os.path.isfile(os.path.join(path, "config.json")):
        return [path], []  # a run: load_run says so if it has not finished
    children = [os.path.join(path, d) for d in sorted(os.listdir(path))]
    runs = [d for d in children if os.path.isfile(os.path.join(d, "config.json"))]
    if not runs:  # a folder of sweeps or of kept groups (`--keep_records`): runs at any depth
        runs = sorted(
            root for root, _, files in os.walk(path) if root != path and "config.json" in files
        )
    if not runs:
        raise FileNotFoundError(
            f"report: {path} holds no run (no config.json in it or its subdirectories)."
        )
    finished = [d for d in runs if os.path.isfile(os.path.join(d, "summary.json"))]
    return finished, [d for d in runs if d not in finished]


def _check_seeds(label: str, runs: Sequence[Run]) -> None:
    seen: dict[int, str] = {}
    for run in runs:
        if run.seed in seen:
            raise ValueError(
                f"report: group {label!r} has seed {run.seed} twice ({seen[run.seed]} and "
                f"{run.workdir}); keep one run per seed."
            )
        seen[run.seed] = run.workdir


def collect_groups(arguments: Sequence[str], log=print, side: str = "test") -> list[Group]:
    """Groups of the command line's arguments (see the module docstring), their runs read on
    `side` of the split (`load_run`).

    Raises:
      ValueError: an explicit group whose configs differ beyond the seed (names the keys), a
        seed twice in one group; FileNotFoundError: a directory without runs, a named run that
        has not finished.
    """
    explicit: list[Group] = []
    loose: list[Run] = []
    for argument in arguments:
        label, sep, dirs = argument.partition("=")
        if sep and not os.path.isdir(argument):
            runs = []
            for path in filter(None, dirs.split(",")):
                finished, unfinished = _run_dirs(path)
                for d in unfinished:
                    log(f"[report] {d}: unfinished (no summary.json), left out")
                runs += [load_run(d, side) for d in finished]
            if not runs:
                raise FileNotFoundError(f"report: group {label!r} has no finished run.")
            keys = differing_keys([r.config for r in runs])
            if keys:
                raise ValueError(
                    f"report: group {label!r} mixes configs that differ in more than the seed: "
                    f"{', '.join(keys)}. Put runs of one config in a group, or give the "
                    "directories without a label to group them by config."
                )
            explicit.append(Group(label, runs, explicit=True))
            continue
        finished, unfinished = _run_dirs(argument)
        for d in unfinished:
            log(f"[report] {d}: unfinished (no summary.json), left out")
        loose += [load_run(d, side) for d in finished]
    by_config: dict[str, list[Run]] = {}
    for run in loose:
        key = config_key(run.config, lambda k: k not in IGNORED_KEYS)
        by_config.setdefault(key, []).append(run)
    configs = [runs[0].config for runs in by_config.values()]
    shown = differing_keys(configs) if len(configs) > 1 else []
    auto = []
    for runs in by_config.values():
        label = ", ".join(f"{k}={runs[0].config.get(k)}" for k in shown)
        auto.append(Group(label or os.path.basename(os.path.dirname(runs[0].workdir)), runs))
    groups = explicit + auto
    for group in groups:
        _check_seeds(group.label, group.runs)
    return groups


def record_copies(groups: Sequence[Group], dest: str) -> list[tuple[str, str]]:
    """(source, target) of every record file of the groups' runs under `dest`:
    `dest/<label>/<run directory name>/<file>` for a group given as LABEL=DIRS (the label with
    runs of other characters than letters, digits and `._=+-` replaced by `_`), else
    `dest/<sweep directory name>/<run directory name>/<file>`, the sweep's own layout, whatever
    groups the report forms. Files a run lacks (`eval_questions.jsonl` of an old run) are
    skipped.

    Raises:
      ValueError: two runs of one group with the same directory name, or a target that exists
        with other content (naming it and the fix).
    """
    copies, targets = [], {}
    for group in groups:
        label_folder = re.sub(r"[^A-Za-z0-9._=+-]+", "_", group.label) or "group"
        for run in group.runs:
            workdir = os.path.normpath(run.workdir)
            folder = label_folder if group.explicit else os.path.basename(os.path.dirname(workdir))
            target_dir = os.path.join(dest, folder, os.path.basename(workdir))
            if target_dir in targets:
                raise ValueError(
                    f"report: --keep_records: {targets[target_dir]} and {run.workdir} would both "
                    f"be kept as {target_dir}; give them distinct directory names or groups."
                )
            targets[target_dir] = run.workdir
            for name in RECORD_FILES:
                source, target = (os.path.join(d, name) for d in (run.workdir, target_dir))
                if not os.path.isfile(source):
                    continue
                if os.path.exists(target) and not filecmp.cmp(source, target, shallow=False):
                    raise ValueError(
                        f"report: --keep_records: {target} exists and differs from {source}; "
                        "keep the records elsewhere or remove the old copy first."
                    )
                copies.append((source, target))
    return copies


def keep_records(groups: Sequence[Group], dest: str) -> list[str]:
    """Copies the groups' run records (`record_copies`) and returns the run directories written;
    nothing is copied when any target conflicts."""
    return copy_records(record_copies(groups, dest))


def copy_records(copies: Sequence[tuple[str, str]]) -> list[str]:
    """Writes the (source, target) pairs of `record_copies`; returns the run directories."""
    for source, target in copies:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.abspath(source) != os.path.abspath(target):
            shutil.copyfile(source, target)
    return sorted({os.path.dirname(target) for _, target in copies})
