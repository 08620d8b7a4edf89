"""The tables and curves of docs/constraints.md, read from finished run directories.

    python experiments/constraints_report.py runs/c_length_hack runs/c_lagrangian runs/c_crpg \
        --ibpo runs/c_ibpo --truncated runs/eval_truncated --figures docs/figures/constraints

For each run: held-out greedy accuracy before and after; the sampled verifier accuracy, the
completion length (tokens) and each judge's violation rate over the first and the last three
steps; the multipliers at the end. With --ibpo: the budgeted run's mean length against its
budget and its accuracy against the base policy truncated at the budget (--truncated: an
evaluation directory of `python -m jaxrl_llm.evaluate ... --max_new_tokens B`). --figures writes
the learning curves (accuracy, length, violation rates, multipliers) as PNG.
"""

from __future__ import annotations

import argparse
import json
import os

from jaxrl_llm.metrics import read_metrics


def _rows(workdir: str) -> list[dict]:
    return [r for r in read_metrics(workdir) if "train/rows" in r]


def _mean(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return sum(values) / len(values) if values else float("nan")


def _summary(workdir: str) -> dict:
    with open(os.path.join(workdir, "summary.json")) as f:
        return json.load(f)


def run_row(workdir: str) -> dict:
    """The figures of one run."""
    rows, summary = _rows(workdir), _summary(workdir)
    first, last = rows[:3], rows[-3:]
    out = {
        "run": os.path.basename(os.path.normpath(workdir)),
        "held-out before": 100 * summary["eval_before"]["accuracy"],
        "held-out after": 100 * summary["eval_after"]["accuracy"],
        "steps": len(rows),
    }
    for key, label in (("reward/accuracy", "sampled acc"), ("completion/length", "tokens")):
        out[f"{label} (first 3)"] = _mean(first, key) * (100 if "acc" in label else 1)
        out[f"{label} (last 3)"] = _mean(last, key) * (100 if "acc" in label else 1)
    judges = sorted({k for r in rows for k in r if k.startswith("reward/judge/")})
    for key in judges:
        name = key.rsplit("/", 1)[1]
        out[f"{name} violations (first 3)"] = 100 * _mean(first, key)
        out[f"{name} violations (last 3)"] = 100 * _mean(last, key)
    for key in sorted({k for r in rows for k in r if k.endswith("/multiplier")}):
        out[key.replace("algo/constraint/", "lambda ")] = rows[-1][key]
    return out


def table(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    for r in rows:
        cells = [r.get(k, "") for k in keys]
        lines.append(
            "| " + " | ".join(f"{c:.1f}" if isinstance(c, float) else str(c) for c in cells) + " |"
        )
    return "\n".join(lines)


PANELS = (
    ("accuracy", ("reward/accuracy",), "verifier accuracy (dashed: held-out, greedy)"),
    ("length", ("completion/length",), "completion length (tokens)"),
    ("length_violations", ("reward/judge/length",), "length judge: violation rate"),
    ("format_violations", ("reward/judge/format",), "format judge: violation rate"),
    (
        "multipliers",
        ("algo/constraint/length/multiplier", "algo/constraint/length/chain_sum/multiplier"),
        "Lagrange multiplier (length)",
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*")
    parser.add_argument("--ibpo", default="")
    parser.add_argument("--truncated", default="", help="evaluation dir of the truncated base")
    parser.add_argument("--figures", default="")
    args = parser.parse_args()
    if args.runs:
        print(table([run_row(w) for w in args.runs]))
    if args.figures and args.runs:
        from jaxrl_llm.plots import plot_runs

        runs = {os.path.basename(os.path.normpath(w)): w for w in args.runs}
        for path in plot_runs(runs, args.figures, smoothing=0.5, panels=PANELS):
            print(path)
    if args.ibpo:
        row = run_row(args.ibpo)
        with open(os.path.join(args.ibpo, "config.json")) as f:
            budgets = json.load(f)["constraints"]["budgets"]
        print(f"\nIBPO ({budgets}):")
        print(table([row]))
        if args.truncated:
            with open(os.path.join(args.truncated, "results.json")) as f:
                print("truncated base:", json.dumps(json.load(f))[:600])


if __name__ == "__main__":
    main()
