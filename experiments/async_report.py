"""The staleness x correction learning table (docs/async.md) from finished asynchronous runs.

    python experiments/async_report.py runs/async_staleness [more sweep or run dirs]

One row per finished run (`summary.json`): staleness bound k, correction, held-out greedy
accuracy before and after at equal learner steps, the gain, and over the run's steps the mean
train accuracy, effective sample size and KL(behaviour || current) of the training batches.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.plots import find_runs

COLUMNS = ("k", "correction", "steps", "before", "after", "gain", "train acc", "ESS", "KL(mu||pi)")


def row(workdir: str) -> dict[str, str] | None:
    """A finished run's cells, or None."""
    if not os.path.exists(os.path.join(workdir, "summary.json")):
        return None
    with open(os.path.join(workdir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(workdir, "config.json")) as f:
        config = json.load(f)
    rows = [r for r in read_metrics(workdir) if "train/rows" in r]
    before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]
    async_rl = config.get("async_rl", {"enabled": False})  # runs from before the section
    k = async_rl["max_staleness"] if async_rl["enabled"] else 0

    def mean(key):
        values = [r[key] for r in rows if key in r]
        return f"{statistics.mean(values):.3f}" if values else ""

    return {
        "k": str(k),
        "correction": config.get("off_policy", {"correction": "none"})["correction"],
        "steps": str(summary["steps"]),
        "before": f"{100 * before:.1f}%",
        "after": f"{100 * after:.1f}%",
        "gain": f"{100 * (after - before):+.1f}",
        "train acc": mean("reward/accuracy"),
        "ESS": mean("train/off_policy/ess"),
        "KL(mu||pi)": mean("train/off_policy/kl_behaviour"),
    }


def main(paths) -> int:
    found = [r for path in paths for r in map(row, find_runs(path).values()) if r]
    found.sort(key=lambda r: (int(r["k"]), r["correction"]))
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + " --- |" * len(COLUMNS))
    for r in found:
        print("| " + " | ".join(r[c] for c in COLUMNS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
