"""One report for learning runs: held-out accuracy over seeds with 95% intervals, as text,
Markdown and a PNG of the held-out curves.

    python -m jaxrl_llm.report runs/seeds/main_job [more dirs] [--out docs/reports/main_job]
    python -m jaxrl_llm.report grpo=runs/a,runs/b,runs/c ppo=runs/d,runs/e,runs/f --out ...

Each argument is a run directory (with `summary.json`), a sweep directory (its finished trials;
unfinished ones are listed and left out; a folder of sweeps or of `--keep_records` groups: the
runs below it) or `LABEL=DIR[,DIR...]`, one explicit group. Runs from
bare directories are grouped by their config minus `seed`; an explicit group whose configs differ
in more than the seed is refused, naming the keys that differ.

Per group: the runs (seeds), held-out greedy accuracy before and after training as mean with a
95% interval (bootstrap over seeds and questions, `jaxrl_llm.evals.intervals`, from each run's
`eval_questions.jsonl`), the gain with its interval (paired by seed and question), the best
evaluation of the mean curve and its step, each seed's drop from its own best to its last
evaluation, the lowest ratio of a seed's last sampled-token entropy to its first (`train/entropy`;
a new default must keep at least a third), the hacks a seed's last evaluation shows
and its first did not (a constant answer, a copied input number: `jaxrl_llm.evals.hacks`, from
the answers `eval_questions.jsonl` keeps; "not kept" for older runs), the gain beyond chance (the
gain in Cohen's kappa between answers and references, which a constant answer does not move:
`jaxrl_llm.evals.agreement`; "not kept" where the records lack references), the mean wall time,
and the CPU the runs recorded. `--out PREFIX` writes
`PREFIX.md` (the same table, with the command, date and CPUs) and `PREFIX.png` (mean held-out
accuracy against step with its 95% band, one line per group; `--no_plot` leaves the PNGs out,
as `jaxrl_llm.report_check` does when it regenerates a report to compare it).

`--against LABEL` adds, for every other group, its final held-out accuracy minus LABEL's with a
95% interval (`intervals.difference_interval`: questions paired, each group's seeds resampled on
their own), so that a win is claimed only where the interval excludes 0; groups must have been
evaluated on the same held-out questions (refused otherwise, naming the keys that differ). With
k > 1 groups compared, a second column gives each difference at 1 - 0.05 / k (Bonferroni), the
intervals that hold all together at 95% (`family_confidence`).

    python -m jaxrl_llm.report GRPO=runs/seeds/main_job PPO=runs/seeds/algorithms/ppo \
        --against GRPO --out docs/reports/algorithms

`--choose_across PREFIX` applies the rule a new default must meet to a sweep run on several
tasks: groups are joined into settings by their config minus the seed and minus every key under
PREFIX (`task.`); a setting qualifies when it ran on every task of the report, each with at least
3 seeds, and on each task its worst seed ends within `--max_drop` points (3) of its own best
evaluation; the chosen one is the qualifying setting of the highest mean gain over tasks
(`jaxrl_llm.report_choice`; the rule's per-run pieces are in `jaxrl_llm.report_rules`). Each
setting is labelled by the keys where it leaves the values most settings share; those are listed
under the table.
`--min_entropy_ratio 0.333` also asks each seed to keep a third of its first sampled entropy
(the share a new default must keep, so a setting that loses more cannot become it); `--max_entropy_ratio
2` asks each to end at most at twice it (past that the samples had turned to noise, 2026-11-29).

    python -m jaxrl_llm.report runs/seeds/stabilisers --choose_across task. \
        --min_entropy_ratio 0.333 --out docs/reports/stabilisers

`--start_from RUN` takes every run's "before" (step 0) from RUN's first evaluation, for a recipe
with a stage before RL (an SFT warm-up): the gain then counts that stage
(`jaxrl_llm.report_start`).

Sides and scorers: tables read the test side of the split (`--side test`, the default), the
questions no setting was chosen by; `--choose_across` chooses on the selection side
(`eval/selection/...`) and the sweep pruner prunes on it, so the reported figures did not pick
the recipe. Runs evaluated before the selection side existed have one held-out side, which the
report names "held_out" and on which a choice is made with that said. Every run is scored by
its `eval.scorer` (`jaxrl_llm.evals.scorers`; older runs by their training answer rule, cut
completions scored): `--against`, `--start_from` and `--choose_across` refuse runs scored
differently, naming the field, and the report's header states the side and the scorer.

`--keep_records DIR` copies each reported run's records (`RECORD_FILES`: the whole input of the
report, tens of kB a run, no checkpoints or samples) to `DIR/<label>/<run name>` for a
`LABEL=DIRS` group and `DIR/<sweep directory name>/<run name>` otherwise, so the report can be
regenerated from a repository after the run directories are gone; a record already there with
other content is refused, nothing copied.

    python -m jaxrl_llm.report RRHF=runs/seeds/rrhf --keep_records docs/reports/runs/algorithms

`--metric NAME` (repeatable) adds a training-stream metric of `metrics.jsonl` per group: its
start and end (each seed's mean over its first and last `--metric_window` steps) over seeds with
95% intervals, the change, and with `--against` each group's end minus that group's; `--out`
also draws its curves to `OUT_<metric>.png` (`jaxrl_llm.report_metrics`).

    python -m jaxrl_llm.report runs/prm_refinement --metric reward/process_steps \
        --metric completion/length --out docs/reports/prm_refinement
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_llm.config import flat_dict
from jaxrl_llm.evals.agreement import kappa_intervals
from jaxrl_llm.evals.hacks import EvalAnswers, find_hacks
from jaxrl_llm.evals.intervals import difference_interval, seeds_questions_interval
from jaxrl_llm.evals.scorers import scorer_of_run
from jaxrl_llm.evals.suite import SELECTION_SET
from jaxrl_llm.metrics import read_eval_rows, read_metrics
from jaxrl_llm.report_choice import choose
from jaxrl_llm.report_metrics import (
    DEFAULT_WINDOW,
    metric_file_suffix,
    metric_section,
    plot_metric,
    save_step_figure,
    step_axes,
)
from jaxrl_llm.report_rules import (
    IGNORED_KEYS,
    config_key,
    differing_keys,
    drop_from_best,
    entropy_ratio,
    held_out_curve,
    sampled_entropy,
    with_added_keys,
)
from jaxrl_llm.report_sides import check_one_scorer, cut_share
from jaxrl_llm.report_start import held_out_of, with_start
from jaxrl_llm.report_tables import (
    choice_markdown,
    comparison_markdown,
    host_cell,
    markdown,
    percent_cell,
)
from jaxrl_llm.user_imports import add_import_option, import_all

__all__ = [
    "Group", "Run", "build_parser", "choice_markdown", "collect_groups", "copy_records", "family_confidence",
    "keep_records", "load_run", "main", "markdown", "percent_cell", "record_copies",
    "summarize",
]  # fmt: skip

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


def _table(runs: Sequence[Run], step_of) -> tuple[np.ndarray, bool]:
    """[S, Q] correctness at each run's `step_of(run)` and whether it is per question (else
    [S, 1] accuracies: the interval then resamples seeds only)."""
    tables = [run.correct.get(step_of(run)) for run in runs]
    if all(t is not None for t in tables) and len({len(t) for t in tables}) == 1:
        return np.stack(tables).astype(np.float64), True
    accuracies = [run.curve.get(step_of(run), np.nan) for run in runs]
    return np.asarray(accuracies, np.float64)[:, None], False


def summarize(group: Group, *, num_resamples: int = 4000) -> dict[str, Any]:
    """The report's row for one group (intervals as `Interval`s, times in minutes)."""
    runs = sorted(group.runs, key=lambda r: r.seed)
    before, per_question = _table(runs, lambda r: 0)
    after, per_question_after = _table(runs, lambda r: r.final_step)
    per_question = per_question and per_question_after and before.shape == after.shape
    if not per_question:  # one accuracy per run on both sides: the interval resamples seeds
        before, after = before.mean(1, keepdims=True), after.mean(1, keepdims=True)
    gain = after - before
    steps = sorted(set.intersection(*(set(r.curve) for r in runs)))
    mean_curve = {s: float(np.mean([r.curve[s] for r in runs])) for s in steps}
    best_step = max(mean_curve, key=lambda s: (mean_curve[s], -s)) if mean_curve else None
    drops = [drop_from_best(r.curve) for r in runs if r.curve]
    # Each seed's last sampled entropy over its first (a new default must keep a third).
    entropy_ratios = [ratio for r in runs if (ratio := entropy_ratio(r.entropy)) is not None]
    hosts = sorted({host_cell(r.summary) for r in runs})
    # The hacks each seed's last evaluation shows against its first (None: answers not kept).
    kept = all(0 in r.answers and r.final_step in r.answers for r in runs)
    hacks = (
        {r.seed: find_hacks(r.answers[0], r.answers[r.final_step]) for r in runs} if kept else None
    )
    # Kappa, the gain beyond what the answer distributions earn by chance (evals.agreement).
    with_references = kept and all(r.answers[s].references for r in runs for s in (0, r.final_step))
    beyond_chance = (
        kappa_intervals(
            [r.answers[0] for r in runs],
            [r.answers[r.final_step] for r in runs],
            num_resamples=num_resamples,
        )
        if with_references
        else None
    )
    interval = lambda table: seeds_questions_interval(table, num_resamples=num_resamples)  # noqa: E731
    return {
        "cut_share": cut_share(runs),
        "label": group.label,
        "seeds": [r.seed for r in runs],
        "before": interval(before),
        "after": interval(after),
        "gain": interval(gain),
        "after_table": after if per_question else None,
        "seed_gains": [float(g) for g in gain.mean(1)],
        "per_question": per_question,
        "questions": before.shape[1] if per_question else None,
        "best": (mean_curve[best_step], best_step) if best_step is not None else None,
        "worst_drop": max(drops) if drops else None,
        "entropy_ratio": min(entropy_ratios) if len(entropy_ratios) == len(runs) else None,
        "entropy_ratio_max": max(entropy_ratios) if len(entropy_ratios) == len(runs) else None,
        "hacks": hacks,
        "beyond_chance": beyond_chance,
        "steps": sorted({r.final_step for r in runs}),
        "wall_min": float(np.mean([r.summary.get("wall_time_s", np.nan) for r in runs])) / 60,
        "hosts": hosts,
        "curves": {s: [r.curve[s] for r in runs] for s in steps},
        "runs": runs,
    }


def _held_out_of(row: Mapping[str, Any]) -> dict[str, Any]:
    return held_out_of(row["runs"][0].config)


def compare(
    rows: Sequence[Mapping[str, Any]],
    against: str,
    *,
    num_resamples: int = 4000,
    confidence: float = 0.95,
):
    """[(label, Interval)] of each other group's final held-out accuracy minus `against`'s, at
    `confidence` (`family_confidence` gives the level that holds for all of them together).

    Raises:
      ValueError: no group is labelled `against`; a group without per-question results; or
        groups evaluated on different held-out questions (the keys that differ named).
    """
    by_label = {row["label"]: row for row in rows}
    if against not in by_label:
        raise ValueError(f"--against {against!r}: no group has that label (the groups: "
                         f"{', '.join(by_label)}).")  # fmt: skip
    check_one_scorer(f"--against {against!r}", [run for row in rows for run in row["runs"]])
    base = by_label[against]
    out = []
    for row in rows:
        if row is base:
            continue
        if row["after_table"] is None or base["after_table"] is None:
            raise ValueError(
                f"--against {against!r}: group {row['label']!r} or {against!r} has no "
                "per-question results (eval_questions.jsonl) to pair questions with."
            )
        keys = differing_keys([_held_out_of(base), _held_out_of(row)])
        if keys or row["after_table"].shape[1] != base["after_table"].shape[1]:
            raise ValueError(
                f"--against {against!r}: group {row['label']!r} was evaluated on other held-out "
                f"questions ({', '.join(keys) or 'another number of questions'} differ); "
                "compare groups of one task and eval set."
            )
        diff = difference_interval(
            row["after_table"],
            base["after_table"],
            confidence=confidence,
            num_resamples=num_resamples,
        )
        out.append((row["label"], diff))
    return out


def family_confidence(num_comparisons: int, confidence: float = 0.95) -> float:
    """The level at which each of `num_comparisons` intervals must be taken for all of them to
    hold together at `confidence` (Bonferroni: 1 - (1 - confidence) / k; 0.99 for 5 at 0.95)."""
    return 1.0 - (1.0 - confidence) / max(num_comparisons, 1)


def plot(rows: Sequence[Mapping[str, Any]], path: str, *, num_resamples: int = 1000) -> str:
    """Writes a PNG of each group's mean held-out accuracy against step with its 95% band."""
    fig, ax = step_axes()
    for row in rows:
        steps = sorted(row["curves"])
        if not steps:
            continue
        runs = row["runs"]
        bands = []
        for step in steps:
            table, _ = _table(runs, lambda r, s=step: s)
            bands.append(seeds_questions_interval(table, num_resamples=num_resamples))
        means = [100 * b.mean for b in bands]
        line = ax.plot(steps, means, marker="o", label=f"{row['label']} ({len(runs)} seeds)")[0]
        ax.fill_between(
            steps, [100 * b.low for b in bands], [100 * b.high for b in bands],
            color=line.get_color(), alpha=0.2,
        )  # fmt: skip
    return save_step_figure(
        fig, ax, path, ylabel="held-out greedy accuracy (%)",
        title="held-out accuracy: mean over seeds, 95% band (seeds x questions)",
    )  # fmt: skip


def choice_inputs(
    paths: Sequence[str], rows: Sequence[Mapping[str, Any]], num_resamples: int
) -> tuple[list[Mapping[str, Any]], str]:
    """(summarized groups, side) that `--choose_across` chooses by: the runs read on the
    selection side when every one of them has it, else `rows` on their own side (runs made
    before the selection side existed; the choice then says so). All must share one scorer."""
    check_one_scorer("--choose_across", [run for row in rows for run in row["runs"]])
    groups = collect_groups(paths, log=lambda _: None, side="selection")
    if all(run.curve for group in groups for run in group.runs):
        return [summarize(g, num_resamples=num_resamples) for g in groups], "selection"
    return list(rows), rows[0]["runs"][0].side


def build_parser() -> argparse.ArgumentParser:
    """The command line's options, each with its help text."""
    parser = argparse.ArgumentParser(
        prog="python -m jaxrl_llm.report",
        description=" ".join(__doc__.split("\n\n")[0].split()),
    )
    parser.add_argument("paths", nargs="+", help="run or sweep directories, or LABEL=DIR,DIR")
    parser.add_argument("--out", help="also write OUT.md and OUT.png")
    parser.add_argument("--no_plot", action="store_true", help="with --out, write OUT.md only")
    parser.add_argument(
        "--resamples", type=int, default=4000, help="bootstrap replicates (default %(default)s)"
    )
    parser.add_argument("--against", help="a group's label: every other group's difference to it")
    parser.add_argument(
        "--side",
        choices=("test", "selection"),
        default="test",
        help="the side of the split the tables read (default test; --choose_across always "
        "chooses on the selection side where the runs have one)",
    )
    parser.add_argument(
        "--choose_across",
        metavar="PREFIX",
        help="join groups into settings across the keys under PREFIX (task.) and choose the "
        "default: the setting of the highest mean gain among those whose every seed ends within "
        "--max_drop points of its best evaluation, on every task, with at least 3 seeds",
    )
    parser.add_argument(
        "--max_drop",
        type=float,
        default=3.0,
        help="with --choose_across, points of held-out accuracy a seed may end below its best "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--min_entropy_ratio",
        type=float,
        default=None,
        metavar="RATIO",
        help="with --choose_across, a setting's seeds must also keep RATIO of their first "
        "sampled entropy, e.g. 0.333 (off by default)",
    )
    parser.add_argument(
        "--max_entropy_ratio",
        type=float,
        default=None,
        metavar="RATIO",
        help="with --choose_across, a setting's seeds must also end at most at RATIO times "
        "their first sampled entropy, e.g. 2: no blow-up (off by default)",
    )
    parser.add_argument(
        "--start_from",
        metavar="RUN",
        help="every run's 'before' is RUN's step-0 evaluation (a recipe with a stage before "
        "RL: the gain then counts it); same held-out questions required",
    )
    parser.add_argument(
        "--keep_records",
        metavar="DIR",
        help="copy the runs' records (config, summary, metrics, held-out answers) under DIR",
    )
    parser.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME",
        help="a training-stream metric of metrics.jsonl to report per group, start and end with "
        "95%% intervals (repeatable), e.g. reward/process_steps",
    )
    parser.add_argument(
        "--metric_window",
        type=int,
        default=DEFAULT_WINDOW,
        metavar="STEPS",
        help="steps averaged at each end of a run for --metric (default %(default)s)",
    )
    add_import_option(
        parser, "a module or .py file registering a scorer the runs name, imported first"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring); exit status 2 on bad input, nothing written."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command = "python -m jaxrl_llm.report " + shlex.join(
        list(argv if argv is not None else sys.argv[1:])
    )
    try:
        import_all(args.imports)
        groups = collect_groups(args.paths, side=args.side)
        start = load_run(args.start_from, args.side) if args.start_from else None
        if start is not None:
            groups = with_start(groups, start)
        rows = [summarize(g, num_resamples=args.resamples) for g in groups]
        diffs = compare(rows, args.against, num_resamples=args.resamples) if args.against else []
        family_diffs = (
            compare(
                rows,
                args.against,
                num_resamples=args.resamples,
                confidence=family_confidence(len(diffs)),
            )
            if len(diffs) > 1
            else None
        )
        metrics_text, metric_rows = (
            metric_section(
                groups,
                args.metric,
                window=args.metric_window,
                against=args.against,
                num_resamples=args.resamples,
            )
            if args.metric
            else ("", {})
        )
        if args.choose_across:
            choice_rows, choice_side = choice_inputs(args.paths, rows, args.resamples)
        copies = record_copies(groups, args.keep_records) if args.keep_records else []
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = markdown(rows, command=command)
    if start is not None:
        text += (
            f"\nBefore is step 0 of {args.start_from} (model {start.config.get('model.name')}) "
            "for every group: the gain counts what came before the runs' own start.\n"
        )
    if args.against:
        text += comparison_markdown(args.against, diffs, family_diffs)
    if args.choose_across:
        max_drop, min_ratio = args.max_drop / 100, args.min_entropy_ratio
        max_ratio = args.max_entropy_ratio
        settings, chosen = choose(
            choice_rows,
            args.choose_across,
            max_drop=max_drop,
            min_entropy_ratio=min_ratio,
            max_entropy_ratio=max_ratio,
        )
        text += choice_markdown(settings, chosen, max_drop, min_ratio, max_ratio, choice_side)
    text += metrics_text
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out + ".md", "w") as f:
            f.write(text)
        written = [args.out + ".md"]
        if not args.no_plot:
            written.append(plot(rows, args.out + ".png"))
            written += [
                plot_metric(rows_of_metric, f"{args.out}_{metric_file_suffix(name)}.png")
                for name, rows_of_metric in metric_rows.items()
            ]
        print(f"[report] wrote {', '.join(written)}")
    if copies:
        kept = copy_records(copies)
        print(f"[report] kept the records of {len(kept)} runs under {args.keep_records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
