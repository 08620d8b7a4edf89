"""A training-stream metric in the report: its start and end per group over seeds, with 95%
intervals, the difference between groups, and its curve.

Held-out accuracy says whether a run learned; what it learned to do is in the per-step metrics
of the training stream (`metrics.jsonl`): steps per completion and completion length for the
step-repeating hack of process rewards (Gao et al., "On Designing Effective RL Reward at
Training Time for LLM Reasoning", arXiv:2410.15115), sampled entropy, the kept-group
fraction. `--metric NAME` adds one such metric to the report:

    python -m jaxrl_llm.report runs/prm_refinement --metric reward/process_steps \
        --metric completion/length --against success_only --out docs/reports/prm_refinement

Per group, a metric's *start* is each seed's mean over its first `window` logged steps and its
*end* the mean over its last `window`; both are given as the mean over seeds with a 95% interval
from the crossed bootstrap of `jaxrl_llm.evals.intervals` on the [seeds, window] table (seeds
and step positions resampled, as held-out accuracy resamples seeds and questions). The change
(end - start) resamples the same table of differences, position by position. With `--against`,
each group's end minus the named group's, seeds resampled per group and step positions paired
(the same seed draws the same prompts at the same step in every group). Averaging over a window
of steps smooths one step's sampling noise (a step has 32 completions in the main job); the
steps within a window are not independent, which the interval does not model, so read it with
the seeds' spread beside it.

`plot_metric` draws each group's mean over seeds against the step, the band spanning the seeds'
lowest and highest value at each step.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from jaxrl_llm.evals.intervals import Interval, difference_interval, seeds_questions_interval
from jaxrl_llm.metrics import read_metrics

__all__ = [
    "DEFAULT_WINDOW",
    "MetricRow",
    "check_metrics_logged",
    "metric_curve",
    "metric_difference",
    "metric_file_suffix",
    "metric_section",
    "metrics_markdown",
    "plot_metric",
    "running_peak",
    "save_step_figure",
    "step_axes",
    "summarize_metric",
]

# Steps averaged at each end of a run (a 30-step run's first and last sixth).
DEFAULT_WINDOW = 5


def metric_curve(metrics: Sequence[Mapping[str, object]], name: str) -> dict[int, float]:
    """{step: value} of metric `name` in a run's metrics rows, the steps that logged it (the
    last row of a step wins: a resumed run logs a step again)."""
    return {
        int(row["step"]): float(row[name])
        for row in metrics
        if name in row and isinstance(row[name], int | float)
    }


class MetricRow(NamedTuple):
    """One group's summary of one metric.

    Attributes:
      label: the group's label.
      name: the metric.
      start, end: mean over seeds of the first / last `window` logged steps, with intervals.
      change: end - start, with its interval.
      end_table: [S, window] each seed's last `window` values (for differences between groups).
      curves: {step: [value per seed]} at the steps every seed logged.
      seed_ends: each seed's end, in seed order.
      seed_peaks: each seed's highest mean over `window` consecutive logged steps and the
        last step of that window, in seed order: a hack that appears mid-run and recedes
        (process rewards' step repeating) shows here and not at the end.
    """

    label: str
    name: str
    start: Interval
    end: Interval
    change: Interval
    end_table: np.ndarray
    curves: dict[int, list[float]]
    seed_ends: list[float]
    seed_peaks: list[tuple[float, int]]


def running_peak(curve: Mapping[int, float], window: int) -> tuple[float, int]:
    """(the highest mean over `window` consecutive logged steps of `curve`, the last step of
    that window); a curve shorter than the window gives its mean and its last step. Ties go
    to the earliest window."""
    steps = sorted(curve)
    values = np.array([curve[s] for s in steps], np.float64)
    width = min(window, len(values))
    means = np.convolve(values, np.full(width, 1.0 / width), mode="valid")
    best = int(np.argmax(means))
    return float(means[best]), steps[best + width - 1]


def summarize_metric(
    label: str,
    curves_by_seed: Sequence[Mapping[int, float]],
    name: str,
    *,
    window: int = DEFAULT_WINDOW,
    num_resamples: int = 4000,
) -> MetricRow | None:
    """A group's `MetricRow` from each seed's {step: value}; None when a seed never logged it.

    Args:
      label: the group's label.
      curves_by_seed: one {step: value} per seed (`metric_curve`), in seed order.
      name: the metric's name (for the row).
      window: steps averaged at each end; a run that logged fewer uses all it has at both ends.
      num_resamples: bootstrap replicates.

    Raises:
      ValueError: a window below 1.
    """
    if window < 1:
        raise ValueError(f"report --metric_window={window} must be >= 1 (steps averaged).")
    if not curves_by_seed or any(not curve for curve in curves_by_seed):
        return None
    width = min(window, *(len(curve) for curve in curves_by_seed))
    ordered = [[curve[s] for s in sorted(curve)] for curve in curves_by_seed]
    start_sw = np.array([values[:width] for values in ordered], np.float64)
    end_sw = np.array([values[-width:] for values in ordered], np.float64)
    interval = lambda table: seeds_questions_interval(table, num_resamples=num_resamples)  # noqa: E731
    shared = sorted(set.intersection(*(set(curve) for curve in curves_by_seed)))
    return MetricRow(
        label=label,
        name=name,
        start=interval(start_sw),
        end=interval(end_sw),
        change=interval(end_sw - start_sw),
        end_table=end_sw,
        curves={s: [curve[s] for curve in curves_by_seed] for s in shared},
        seed_ends=[float(v) for v in end_sw.mean(1)],
        seed_peaks=[running_peak(curve, width) for curve in curves_by_seed],
    )


def metric_difference(
    row: MetricRow, base: MetricRow, *, num_resamples: int = 4000, confidence: float = 0.95
) -> Interval:
    """`row`'s end minus `base`'s, with a bootstrap interval (seeds per group, step positions
    paired: `intervals.difference_interval`).

    Raises:
      ValueError: the two ends average different numbers of steps (runs of other lengths).
    """
    if row.end_table.shape[1] != base.end_table.shape[1]:
        raise ValueError(
            f"report --metric {row.name}: groups {row.label!r} and {base.label!r} average "
            f"{row.end_table.shape[1]} and {base.end_table.shape[1]} steps at the end (runs of "
            "other lengths); compare runs of one length or set --metric_window to the shorter."
        )
    return difference_interval(
        row.end_table, base.end_table, num_resamples=num_resamples, confidence=confidence
    )


def check_metrics_logged(
    names: Sequence[str], metrics_of_runs: Sequence[Sequence[Mapping[str, object]]]
) -> None:
    """Raises ValueError when a metric of `names` is logged by none of the runs (each run's
    metrics rows, `read_metrics`), naming the closest metrics they do log (a typo in
    `--metric`)."""
    logged: set[str] = set()
    for metrics in metrics_of_runs:
        for row in metrics:
            logged.update(k for k, v in row.items() if isinstance(v, int | float))
    for name in names:
        if name not in logged:
            close = difflib.get_close_matches(name, sorted(logged), n=4, cutoff=0.4)
            hint = f" Close: {', '.join(close)}." if close else ""
            raise ValueError(
                f"report --metric {name!r}: no run logged it (metrics.jsonl).{hint} Give a key "
                "the runs log, e.g. reward/process_steps, completion/length, train/entropy."
            )


def _cell(interval: Interval, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{interval.mean:{sign}.3g} [{interval.low:{sign}.3g}, {interval.high:{sign}.3g}]"


def _difference_cell(interval: Interval) -> str:
    return _cell(interval, signed=True) + ("" if interval.excludes_zero() else " (includes 0)")


def metrics_markdown(
    rows: Sequence[MetricRow | tuple[str, str]],
    *,
    window: int,
    against: str | None = None,
    differences: Mapping[tuple[str, str], Interval] | None = None,
) -> str:
    """The metrics table: a row per group and metric (a (label, name) pair for a group whose
    runs did not all log it); with `against`, each group's end minus that group's."""
    lines = [
        "",
        f"Training-stream metrics (`metrics.jsonl`): start and end are each seed's mean over "
        f"its first and last {window} logged steps, as the mean over seeds with a 95% interval "
        "(seeds and step positions resampled; steps within a window are correlated, so the "
        "interval is optimistic: see the per-seed ends). Per-seed peak: each seed's highest "
        f"mean over {window} consecutive steps, at the window's last step (a change mid-run "
        "that recedes by the end shows there).",
        "",
        "| metric | group | start | end | change | per-seed ends | per-seed peaks (step) |"
        + (f" end minus {against} |" if against else ""),
        "| --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if against else ""),
    ]
    for row in rows:
        if not isinstance(row, MetricRow):
            label, name = row
            lines.append(f"| {name} | {label} | not logged by every seed | | | | |"
                         + (" |" if against else ""))  # fmt: skip
            continue
        cells = [
            row.name,
            row.label,
            _cell(row.start),
            _cell(row.end),
            _difference_cell(row.change),
            " / ".join(f"{v:.3g}" for v in row.seed_ends),
            " / ".join(f"{v:.3g} ({step})" for v, step in row.seed_peaks),
        ]
        if against:
            diff = (differences or {}).get((row.name, row.label))
            cells.append("" if diff is None else _difference_cell(diff))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def metric_section(
    groups: Sequence,
    names: Sequence[str],
    *,
    window: int = DEFAULT_WINDOW,
    against: str | None = None,
    num_resamples: int = 4000,
) -> tuple[str, dict[str, list[MetricRow]]]:
    """The report's metrics: (its Markdown, {metric: the groups' `MetricRow`s}).

    Args:
      groups: the report's groups (`report.Group`: a label and runs with a seed and a workdir).
      names: the metrics, e.g. ("reward/process_steps", "completion/length").
      window, num_resamples: as `summarize_metric`.
      against: a group's label: each other group's end minus its end.

    Raises:
      ValueError: a metric no run logged (`check_metrics_logged`), a bad window, or ends of
        different widths to compare.
    """
    metrics_of = {  # each run's metrics.jsonl, read once for every metric
        run.workdir: read_metrics(run.workdir) for group in groups for run in group.runs
    }
    check_metrics_logged(names, list(metrics_of.values()))
    table: list[MetricRow | tuple[str, str]] = []
    by_name: dict[str, list[MetricRow]] = {}
    differences: dict[tuple[str, str], Interval] = {}
    for name in names:
        summaries = {}
        for group in groups:
            runs = sorted(group.runs, key=lambda run: run.seed)
            curves = [metric_curve(metrics_of[run.workdir], name) for run in runs]
            row = summarize_metric(
                group.label, curves, name, window=window, num_resamples=num_resamples
            )
            summaries[group.label] = row
            table.append(row if row is not None else (group.label, name))
        by_name[name] = [row for row in summaries.values() if row is not None]
        base = summaries.get(against) if against else None
        for label, row in summaries.items():
            if base is not None and row is not None and row is not base:
                differences[(name, label)] = metric_difference(
                    row, base, num_resamples=num_resamples
                )
    text = metrics_markdown(table, window=window, against=against, differences=differences)
    return text, by_name


def metric_file_suffix(name: str) -> str:
    """`reward/process_steps` -> `reward_process_steps`, for `OUT_<suffix>.png`."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def step_axes():
    """(figure, axes) of a report curve against the RL step (matplotlib, needed for --out)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            "report: the PNG needs matplotlib; pip install matplotlib (or the dev extra)."
        ) from e
    fig = Figure(figsize=(7, 4.2))
    return fig, fig.add_subplot()


def save_step_figure(fig, ax, path: str, *, ylabel: str, title: str) -> str:
    """Labels `step_axes`' axes, writes the PNG to `path` and returns it."""
    ax.set_xlabel("RL step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_metric(rows: Sequence[MetricRow], path: str) -> str:
    """Writes a PNG of one metric: each group's mean over seeds against the step, the band from
    the seeds' lowest to highest value."""
    fig, ax = step_axes()
    for row in rows:
        steps = sorted(row.curves)
        values = np.array([row.curves[s] for s in steps])  # [steps, seeds]
        seeds = values.shape[1]
        line = ax.plot(steps, values.mean(1), label=f"{row.label} ({seeds} seeds)")[0]
        ax.fill_between(steps, values.min(1), values.max(1), color=line.get_color(), alpha=0.2)
    name = rows[0].name if rows else ""
    title = f"{name}: mean over seeds\n(band: from the lowest to the highest seed)"
    return save_step_figure(fig, ax, path, ylabel=name, title=title)
