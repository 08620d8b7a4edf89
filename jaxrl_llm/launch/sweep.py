"""A sweep launched: its trials planned, pruned, run, and summarised in two tables.

    results = launch("experiments/configs/grpo_tiny.py", axis("seed", [0, 1]), "runs/seeds")
    [r.status for r in results]   # "ok", "failed", "reused", "pruned" or "not selected" each

What `launch` writes under the sweep directory is listed in `jaxrl_llm.launch.cli`, the command
line (`python -m jaxrl_llm.launch`) that calls it.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxrl_llm.launch.backends import TrialResult, run_local, run_xmanager
from jaxrl_llm.launch.plan import Trial, plan, write_plan
from jaxrl_llm.launch.prune import setting_pruner
from jaxrl_llm.metrics import read_metrics

__all__ = [
    "SUMMARY_METRICS",
    "final_metrics",
    "in_only_order",
    "launch",
    "summary_rows",
    "write_summary",
]

# Columns of the summary table, when any trial logged them (KL: kl_ref when beta > 0).
SUMMARY_METRICS = (
    "reward/mean",
    "reward/accuracy",
    "eval/accuracy",
    "train/kl_ref",
    "train/approx_kl",
    "train/entropy",
    "completion/length",
)


def final_metrics(workdir: str) -> dict[str, float]:
    """The last value of every key in `workdir/metrics.jsonl` (and `step`, the last step)."""
    final: dict[str, float] = {}
    for row in read_metrics(workdir):
        final.update(row)
    return final


def summary_rows(results: Sequence[TrialResult]) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows) of the summary table: trial, status, seconds, overrides, final metrics."""
    keys: list[str] = []
    for r in results:
        keys += [k for k in r.trial.overrides if k not in keys]
    finals = [final_metrics(r.trial.workdir) for r in results]
    metrics = [m for m in SUMMARY_METRICS if any(m in f for f in finals)]
    columns = ["trial", "status", "seconds", *keys, "step", *metrics]
    rows = []
    for r, final in zip(results, finals, strict=True):
        row = {"trial": r.trial.name, "status": r.status, "seconds": round(r.seconds, 1)}
        row.update({k: r.trial.overrides.get(k, "") for k in keys})
        row["step"] = int(final["step"]) if "step" in final else ""
        row.update({m: final.get(m, "") for m in metrics})
        rows.append(row)
    return columns, rows


def _md_cell(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value).replace("|", "\\|")


def write_summary(sweep_dir: str, results: Sequence[TrialResult]) -> tuple[str, str]:
    """Writes `summary.csv` (exact values) and `summary.md`; returns their paths."""
    columns, rows = summary_rows(results)
    csv_path = os.path.join(sweep_dir, "summary.csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    md_path = os.path.join(sweep_dir, "summary.md")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_md_cell(row[c]) for c in columns) + " |" for row in rows]
    with open(md_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return csv_path, md_path


def launch(
    config_path: str,
    trials: Sequence[Mapping[str, Any]],
    sweep_dir: str,
    *,
    parallel: int = 1,
    launcher: str = "local",
    base: Mapping[str, Any] | None = None,
    gin_files: Sequence[str] = (),
    gin_bindings: Sequence[str] = (),
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    rerun: bool = False,
    prune_drop: float | None = None,
    prune_entropy: float | None = None,
    prune_entropy_max: float | None = None,
    prune_across: Sequence[str] = ("task.",),
    only: Sequence[int] | None = None,
    imports: Sequence[str] = (),
    log: Callable[[str], None] = print,
) -> list[TrialResult]:
    """Plans, runs and summarises a sweep (the layout under `sweep_dir`: `jaxrl_llm.launch.cli`); with
    `prune_drop`, `prune_entropy` or `prune_entropy_max`, the trials of a setting that can no
    longer qualify are skipped (`prune.setting_pruner`); with `only`, just the trials of
    those indices run.

    Example:
      >>> from jaxrl_llm.sweeps import axis
      >>> results = launch("experiments/configs/grpo_tiny.py", axis("seed", [0, 1]), "runs/seeds",
      ...                  parallel=2, base={"train.num_steps": 2})
      >>> [r.status for r in results]
      ['ok', 'ok']
    """
    planned = plan(
        config_path,
        trials,
        sweep_dir,
        base=base,
        gin_files=gin_files,
        gin_bindings=gin_bindings,
        python=python,
        imports=imports,
    )
    skip = None
    if prune_drop is not None or prune_entropy is not None or prune_entropy_max is not None:
        if launcher != "local":
            raise ValueError("launch: the --prune_* flags need --launcher local.")
        skip = setting_pruner(
            planned,
            max_drop=prune_drop,
            min_entropy_ratio=prune_entropy,
            max_entropy_ratio=prune_entropy_max,
            across=prune_across,
        )
    write_plan(
        sweep_dir,
        config_path,
        planned,
        base=dict(base or {}),
        gin_files=list(gin_files),
        gin_bindings=list(gin_bindings),
        launcher=launcher,
    )
    select = None
    if only is not None:
        unknown = sorted(set(only) - {t.index for t in planned})
        if unknown:
            raise ValueError(
                f"launch: --only names trials {unknown} the sweep does not have (its trials are "
                f"0-{len(planned) - 1}; --dry_run lists them)."
            )
        if launcher != "local":
            raise ValueError("launch: --only needs --launcher local.")
        select = lambda trial: trial.index in only  # noqa: E731
    if launcher == "local":
        results = run_local(
            in_only_order(planned, only),
            parallel=parallel,
            env=env,
            rerun=rerun,
            log=log,
            skip=skip,
            select=select,
        )
        results.sort(key=lambda result: result.trial.index)
    elif launcher == "xmanager":
        if env:
            raise ValueError("launch: env= is not supported with launcher='xmanager'.")
        results = run_xmanager(
            planned,
            parallel=parallel,
            title=os.path.basename(os.path.abspath(sweep_dir)),
            rerun=rerun,
            log=log,
        )
    else:
        raise ValueError(f"launch: launcher={launcher!r} must be 'local' or 'xmanager'.")
    csv_path, md_path = write_summary(sweep_dir, results)
    log(f"[launch] summary: {csv_path}, {md_path}")
    return results


def in_only_order(trials: Sequence[Trial], only: Sequence[int] | None) -> list[Trial]:
    """`trials` with those `only` names first, in the order it names them (`--only 42,30,36`
    runs trial 42 first), then the others in plan order."""
    rank = {index: i for i, index in enumerate(only or ())}
    return sorted(trials, key=lambda trial: rank.get(trial.index, len(rank)))
