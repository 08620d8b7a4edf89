"""One report for learning runs: held-out accuracy over seeds with 95% intervals, as text,
Markdown and a PNG of the held-out curves.

    python -m jaxrl_llm.report runs/seeds/main_job [more dirs] [--out docs/reports/main_job]
    python -m jaxrl_llm.report grpo=runs/a,runs/b,runs/c ppo=runs/d,runs/e,runs/f --out ...

Each argument is a run directory, a sweep directory or `LABEL=DIR[,DIR...]`, one explicit group
(`jaxrl_llm.report.loading` reads and groups them); each group's row is described in
`jaxrl_llm.report.summary`. `--out PREFIX` writes `PREFIX.md` (the same table, with the command,
date and CPUs) and `PREFIX.png` (mean held-out accuracy against step with its 95% band, one line
per group; `--no_plot` leaves the PNGs out, as `jaxrl_llm.report.check` does when it regenerates
a report to compare it).

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
(`jaxrl_llm.report.choice`; the rule's per-run pieces are in `jaxrl_llm.report.rules`). Each
setting is labelled by the keys where it leaves the values most settings share; those are listed
under the table.
`--min_entropy_ratio 0.333` also asks each seed to keep a third of its first sampled entropy
(the share a new default must keep, so a setting that loses more cannot become it); `--max_entropy_ratio
2` asks each to end at most at twice it (past that the samples had turned to noise, 2026-11-29).

    python -m jaxrl_llm.report runs/seeds/stabilisers --choose_across task. \
        --min_entropy_ratio 0.333 --out docs/reports/stabilisers

`--start_from RUN` takes every run's "before" (step 0) from RUN's first evaluation, for a recipe
with a stage before RL (an SFT warm-up): the gain then counts that stage
(`jaxrl_llm.report.start`).

Sides and scorers: tables read the test side of the split (`--side test`, the default), the
questions no setting was chosen by; `--choose_across` chooses on the selection side
(`eval/selection/...`) and the sweep pruner prunes on it, so the reported figures did not pick
the recipe. Runs evaluated before the selection side existed have one held-out side, which the
report names "held_out" and on which a choice is made with that said. Every run is scored by
its `eval.scorer` (`jaxrl_llm.evals.scorers`; older runs by their training answer rule, cut
completions scored): `--against`, `--start_from` and `--choose_across` refuse runs scored
differently, naming the field, and the report's header states the side and the scorer.

`--keep_records DIR` copies each reported run's records under DIR, so the report can be
regenerated from a repository after the run directories are gone (`loading.keep_records`: the
layout, and what is refused).

    python -m jaxrl_llm.report RRHF=runs/seeds/rrhf --keep_records docs/reports/runs/algorithms

`--metric NAME` (repeatable) adds a training-stream metric of `metrics.jsonl` per group: its
start and end (each seed's mean over its first and last `--metric_window` steps) over seeds with
95% intervals, the change, and with `--against` each group's end minus that group's; `--out`
also draws its curves to `OUT_<metric>.png` (`jaxrl_llm.report.metrics`).

    python -m jaxrl_llm.report runs/prm_refinement --metric reward/process_steps \
        --metric completion/length --out docs/reports/prm_refinement
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

from jaxrl_llm.report.choice import choose
from jaxrl_llm.report.loading import Run, collect_groups, copy_records, load_run, record_copies
from jaxrl_llm.report.metrics import DEFAULT_WINDOW, metric_file_suffix, metric_section, plot_metric
from jaxrl_llm.report.start import with_start
from jaxrl_llm.report.summary import choice_inputs, compare, family_confidence, plot, summarize
from jaxrl_llm.report.tables import choice_markdown, comparison_markdown, markdown
from jaxrl_llm.user_imports import add_import_option, import_all

__all__ = ["build_parser", "main"]


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


class _Figures(NamedTuple):
    """What the command computed from its input before it writes anything."""

    rows: list[dict[str, Any]]  # one per group (`summarize`)
    start: Run | None  # `--start_from`'s run
    diffs: list  # `--against`: [(label, Interval)] at 95%
    family_diffs: list | None  # the same at the family level, for more than one difference
    metrics_text: str  # the `--metric` section
    metric_rows: dict[str, Any]  # {metric: its rows}, for its curves
    choice_rows: list | None  # `--choose_across`: the rows it chooses by
    choice_side: str | None  # and the side of the split they come from
    copies: list[tuple[str, str]]  # `--keep_records`: (source, target) files


def _differences(rows, against: str, num_resamples: int) -> tuple[list, list | None]:
    """`--against`: each other group's difference at 95% and, when there are several, at the
    level that holds for all of them together (`family_confidence`)."""
    diffs = compare(rows, against, num_resamples=num_resamples)
    if len(diffs) < 2:
        return diffs, None
    level = family_confidence(len(diffs))
    return diffs, compare(rows, against, num_resamples=num_resamples, confidence=level)


def _figures(args: argparse.Namespace) -> _Figures:
    """Reads the runs and computes every table; FileNotFoundError or ValueError on bad input."""
    groups = collect_groups(args.paths, side=args.side)
    start = load_run(args.start_from, args.side) if args.start_from else None
    if start is not None:
        groups = with_start(groups, start)
    rows = [summarize(g, num_resamples=args.resamples) for g in groups]
    diffs, family_diffs = (
        _differences(rows, args.against, args.resamples) if args.against else ([], None)
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
    choice_rows, choice_side = (
        choice_inputs(args.paths, rows, args.resamples) if args.choose_across else (None, None)
    )
    copies = record_copies(groups, args.keep_records) if args.keep_records else []
    return _Figures(
        rows=rows,
        start=start,
        diffs=diffs,
        family_diffs=family_diffs,
        metrics_text=metrics_text,
        metric_rows=metric_rows,
        choice_rows=choice_rows,
        choice_side=choice_side,
        copies=copies,
    )


def _choice_text(args: argparse.Namespace, figures: _Figures) -> str:
    """`--choose_across`: the settings, the rule and the chosen one, as Markdown."""
    max_drop, min_ratio = args.max_drop / 100, args.min_entropy_ratio
    max_ratio = args.max_entropy_ratio
    settings, chosen = choose(
        figures.choice_rows,
        args.choose_across,
        max_drop=max_drop,
        min_entropy_ratio=min_ratio,
        max_entropy_ratio=max_ratio,
    )
    return choice_markdown(settings, chosen, max_drop, min_ratio, max_ratio, figures.choice_side)


def _report_text(args: argparse.Namespace, figures: _Figures, command: str) -> str:
    """The report's Markdown: the table, then each section its options ask for."""
    text = markdown(figures.rows, command=command)
    if figures.start is not None:
        text += (
            f"\nBefore is step 0 of {args.start_from} (model "
            f"{figures.start.config.get('model.name')}) for every group: the gain counts what "
            "came before the runs' own start.\n"
        )
    if args.against:
        text += comparison_markdown(args.against, figures.diffs, figures.family_diffs)
    if args.choose_across:
        text += _choice_text(args, figures)
    return text + figures.metrics_text


def _write(out: str, text: str, figures: _Figures, *, with_plots: bool) -> list[str]:
    """Writes `out.md` and, `with_plots`, the PNGs of the held-out and metric curves."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".md", "w") as f:
        f.write(text)
    written = [out + ".md"]
    if with_plots:
        written.append(plot(figures.rows, out + ".png"))
        written += [
            plot_metric(rows_of_metric, f"{out}_{metric_file_suffix(name)}.png")
            for name, rows_of_metric in figures.metric_rows.items()
        ]
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring); exit status 2 on bad input, nothing written."""
    args = build_parser().parse_args(argv)
    command = "python -m jaxrl_llm.report " + shlex.join(
        list(argv if argv is not None else sys.argv[1:])
    )
    try:
        import_all(args.imports)
        figures = _figures(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = _report_text(args, figures, command)
    print(text)
    if args.out:
        written = _write(args.out, text, figures, with_plots=not args.no_plot)
        print(f"[report] wrote {', '.join(written)}")
    if figures.copies:
        kept = copy_records(figures.copies)
        print(f"[report] kept the records of {len(kept)} runs under {args.keep_records}")
    return 0
