"""Learning curves of a run or a sweep as PNG files: reward, accuracy, KL, entropy, length vs step.

    python -m jaxrl_llm.plots WORKDIR_OR_SWEEP_DIR --out DIR [--smoothing 0.6]

A workdir is a directory with `metrics.jsonl` (written by `jaxrl_llm.runners.train`); a sweep
directory holds trials' workdirs (`sweep.json` from `jaxrl_llm.launch` names and orders them; any
subdirectory with `metrics.jsonl` counts otherwise). Each metric gets one PNG with one line per
run (`reward.png`, `accuracy.png`, `kl.png`, `entropy.png`, `length.png`), and
`learning_curves.png` shows all five side by side. The accuracy panel adds the held-out greedy
accuracy (`eval/accuracy`, before the first and after the last step) as dashed lines with markers.
The KL panel shows `train/kl_ref` (KL to the frozen reference, logged when kl_beta > 0) or else
`train/approx_kl` (to the rollout policy).

Figures are drawn on `matplotlib.figure.Figure` objects, without pyplot's global state, so this
works in scripts, tests and notebooks alike. At the end of a command-line run,
`plot_finished_run(workdir)` writes its curves into `workdir/plots` and says where its outputs are.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from jaxrl_llm.metrics import EVAL_COMPLETIONS_FILE, read_metrics

# (file stem, metric keys in order of preference, title).
PANELS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("reward", ("reward/mean",), "reward (mean over completions)"),
    ("accuracy", ("reward/accuracy",), "accuracy (dashed: held-out, greedy)"),
    ("kl", ("train/kl_ref", "algo/kl", "train/approx_kl"), "KL"),
    ("entropy", ("train/entropy",), "entropy (nats per token)"),
    ("length", ("completion/length",), "completion length (tokens)"),
)
EVAL_KEY = "eval/accuracy"


def find_runs(path: str) -> dict[str, str]:
    """`{label: workdir}` of a workdir (one run) or a sweep directory (its trials, in order)."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"plots: no such directory: {path!r}.")
    if os.path.exists(os.path.join(path, "metrics.jsonl")):
        return {os.path.basename(os.path.normpath(path)): path}
    plan = os.path.join(path, "sweep.json")
    if os.path.exists(plan):
        with open(plan) as f:
            trials = json.load(f)["trials"]
        runs = {t["name"]: t["workdir"] for t in trials}
        # Workdirs are absolute; if the sweep directory moved, look next to sweep.json.
        runs = {k: v if os.path.isdir(v) else os.path.join(path, k) for k, v in runs.items()}
    else:
        runs = {d: os.path.join(path, d) for d in sorted(os.listdir(path))}
    runs = {k: v for k, v in runs.items() if os.path.exists(os.path.join(v, "metrics.jsonl"))}
    if not runs:
        raise FileNotFoundError(
            f"plots: {path!r} holds no metrics.jsonl (neither a run nor a sweep)."
        )
    return runs


def series(rows: Sequence[Mapping[str, float]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric over the rows that log it."""
    points = [(int(r["step"]), float(r[key])) for r in rows if key in r]
    return [s for s, _ in points], [v for _, v in points]


def smooth(values: Sequence[float], weight: float) -> list[float]:
    """TensorBoard-style exponential moving average (weight 0: unchanged); NaNs are skipped."""
    if not weight:
        return list(values)
    out, last = [], None
    for v in values:
        if not math.isnan(v):
            last = v if last is None else weight * last + (1 - weight) * v
        out.append(float("nan") if last is None else last)
    return out


def _point(key: str, steps: list[int], values: list[float]) -> dict:
    return {"key": key, "points": len(steps), "last_step": steps[-1], "last_value": values[-1]}


def _draw(ax, panel, runs_rows: Mapping[str, Sequence[Mapping[str, float]]], smoothing: float):
    """Draws one panel; returns per curve its metric key, point count and last (step, value)."""
    stem, keys, title = panel
    used, drawn = set(), {}
    for i, (label, rows) in enumerate(runs_rows.items()):
        color = f"C{i % 10}"
        key = next((k for k in keys if any(k in r for r in rows)), None)
        if key is not None:
            used.add(key)
            steps, values = series(rows, key)
            drawn[label] = _point(key, steps, values)
            style = "-o" if len(steps) <= 20 else "-"
            ax.plot(steps, smooth(values, smoothing), style, color=color, markersize=3, label=label)
        if stem == "accuracy":
            steps, values = series(rows, EVAL_KEY)
            if steps:
                held_out = f"{label} (held-out)"
                drawn[held_out] = _point(EVAL_KEY, steps, values)
                ax.plot(steps, values, "--s", color=color, markersize=5, alpha=0.8, label=held_out)
    if stem == "kl" and used:
        title = f"KL ({' / '.join(sorted(used))})"
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.grid(alpha=0.3)
    if not used and stem != "accuracy":
        ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    return drawn


def _legend(ax, n_runs: int) -> None:
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=7 if n_runs > 4 else 8, loc="best")


def _save(fig: Figure, path: str, dpi: int, drawn: dict) -> str:
    # The last point of every curve rides along in the PNG's text chunk "jaxrl_llm": the numbers
    # behind the picture, for checks and for readers who want exact values (see `png_curves`).
    fig.savefig(
        path, dpi=dpi, metadata={"Software": "jaxrl_llm.plots", "jaxrl_llm": json.dumps(drawn)}
    )
    return path


def plot_runs(
    runs: Mapping[str, str] | str,
    out_dir: str,
    *,
    smoothing: float = 0.0,
    dpi: int = 100,
    panels: Sequence[tuple[str, tuple[str, ...], str]] = PANELS,
) -> list[str]:
    """Writes the learning-curve PNGs of `runs` into `out_dir`; returns their paths.

    Args:
      runs: `{label: workdir}`, or a path that `find_runs` understands.
      out_dir: created if needed.
      smoothing: exponential moving-average weight in [0, 1) for the training curves (the
        stored last values stay unsmoothed).
      dpi: resolution (a single panel is 6 x 4 inches: 600 x 400 pixels at dpi 100).
      panels: (file stem, metric keys in order of preference, title) of each panel; default
        `PANELS`.

    Returns:
      Paths of one PNG per panel (reward.png, accuracy.png, kl.png, entropy.png, length.png by
      default), then learning_curves.png with every panel.

    Example:
      >>> plot_runs("runs/tiny_estimators", "runs/tiny_estimators/plots")
    """
    if isinstance(runs, str):
        runs = find_runs(runs)
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"plots: smoothing={smoothing} must be in [0, 1).")
    runs_rows = {label: read_metrics(workdir) for label, workdir in runs.items()}
    os.makedirs(out_dir, exist_ok=True)
    paths, everything = [], {}
    for panel in panels:
        fig = Figure(figsize=(6, 4), layout="constrained")
        ax = fig.add_subplot()
        drawn = everything[panel[0]] = _draw(ax, panel, runs_rows, smoothing)
        _legend(ax, len(runs_rows))
        paths.append(_save(fig, os.path.join(out_dir, f"{panel[0]}.png"), dpi, {panel[0]: drawn}))
    fig = Figure(figsize=(4 * len(panels), 3.6), layout="constrained")
    axes = fig.subplots(1, len(panels))
    for ax, panel in zip(axes, panels, strict=True):
        _draw(ax, panel, runs_rows, smoothing)
    _legend(axes[0], len(runs_rows))
    paths.append(_save(fig, os.path.join(out_dir, "learning_curves.png"), dpi, everything))
    return paths


# What a finished run's last line lists, when present, before `plots/`.
RUN_OUTPUTS = ("metrics.jsonl", EVAL_COMPLETIONS_FILE, "summary.json")


def plot_finished_run(workdir: str, *, log: Callable[[str], None] = print) -> list[str]:
    """Writes a finished run's curves into `workdir/plots` (`plot_runs`) and logs where its
    outputs are: "[jaxrl_llm] outputs in runs/x: metrics.jsonl, eval_completions.jsonl,
    summary.json, plots/". A plotting error is logged, not raised: the run itself is done.

    Returns:
      The PNG paths written; empty without `metrics.jsonl` or after an error.
    """
    paths = []
    if os.path.isfile(os.path.join(workdir, "metrics.jsonl")):
        try:
            paths = plot_runs(workdir, os.path.join(workdir, "plots"))
        except Exception as e:  # noqa: BLE001 -- a finished run must not fail on its plots
            log(f"[jaxrl_llm] warning: curves not plotted ({type(e).__name__}: {e})")
    names = [name for name in RUN_OUTPUTS if os.path.exists(os.path.join(workdir, name))]
    names += ["plots/"] if paths else []
    log(f"[jaxrl_llm] outputs in {workdir}: {', '.join(names) or 'none'}")
    return paths


def png_curves(path: str) -> dict:
    """What a PNG of `plot_runs` shows: `{panel: {run: {key, points, last_step, last_value}}}`."""
    from PIL import Image

    with Image.open(path) as image:
        return json.loads(image.text["jaxrl_llm"])


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m jaxrl_llm.plots", description=__doc__.split("\n")[0]
    )
    parser.add_argument("path", help="a run's workdir or a sweep directory")
    parser.add_argument("--out", required=True, help="directory for the PNG files")
    parser.add_argument("--smoothing", type=float, default=0.0, help="EMA weight in [0, 1)")
    args = parser.parse_args(argv)
    try:
        paths = plot_runs(args.path, args.out, smoothing=args.smoothing)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
