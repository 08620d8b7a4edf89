"""Before/after table of runs and sweeps: held-out greedy accuracy, gain, steps and wall time.

    python experiments/recipe_report.py runs/recipe runs/recipe_tasks [--out docs/recipe_runs.md]

Each argument is a run directory or a sweep directory (`jaxrl_llm.plots.find_runs`); each run's
`summary.json` (written when it finished) and `config.json` give one row: task, learning rate,
accuracy before and after, the gain in points, steps, and the process's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from jaxrl_llm.plots import find_runs

COLUMNS = ("run", "task", "lr", "before", "after", "gain", "steps", "wall (min)")


def run_row(label: str, workdir: str) -> dict | None:
    """One run's row, or None when it has not finished (no summary.json)."""
    path = os.path.join(workdir, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        summary = json.load(f)
    with open(os.path.join(workdir, "config.json")) as f:
        config = json.load(f)
    before = (summary.get("eval_before") or {}).get("accuracy")
    after = (summary.get("eval_after") or {}).get("accuracy")
    return {
        "run": label,
        "task": config["task"]["name"],
        "lr": f"{config['optimizer']['learning_rate']:g}",
        "before": "" if before is None else f"{100 * before:.1f}%",
        "after": "" if after is None else f"{100 * after:.1f}%",
        "gain": "" if None in (before, after) else f"{100 * (after - before):+.1f}",
        "steps": str(summary.get("steps", "")),
        "wall (min)": f"{summary.get('wall_time_s', 0) / 60:.1f}",
    }


def table(paths) -> str:
    """The Markdown table of every finished run under `paths`."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for path in paths:
        for label, workdir in find_runs(path).items():
            row = run_row(label, workdir)
            if row is not None:
                lines.append("| " + " | ".join(row[c] for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="run or sweep directories")
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args(argv)
    text = table(args.paths)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
