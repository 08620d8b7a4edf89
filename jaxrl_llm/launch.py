"""Sweep launcher: each trial is `python -m jaxrl_llm.main ...` in its own workdir, N at a time.

    python -m jaxrl_llm.launch --config experiments/configs/grpo_tiny.py \\
        --sweep experiments/sweeps/tiny_estimators.py --sweep_dir runs/tiny_estimators \\
        --parallel 2 [--seeds 0,1,2] [--set train.num_steps=8] [--gin_file F.gin] \\
        [--gin_bindings 'X.y = v'] [--launcher local|xmanager] [--python PATH] [--dry_run]

`--seeds 0,1,2` runs every trial once per seed (without `--sweep`, the config itself): the runs
`python -m jaxrl_llm.report` summarises with intervals. On a 2-core machine keep `--parallel 1`;
an interrupted sweep resumes where it stopped when the same command runs again.

Before anything runs, every trial's config is built and validated (`sweeps.check_trials`), so a
typo fails the whole sweep at once. Then, under `--sweep_dir`:

    sweep.json            the plan: config, shared overrides, and per trial its overrides,
                          workdir and exact command line
    <NNN_name>/           one trial's workdir (metrics.jsonl, summary.json, checkpoints, ...)
    <NNN_name>/log.txt    its stdout and stderr
    summary.csv           one row per trial: status, seconds, overrides, final metrics (exact
                          floats: the last value of each key in the trial's metrics.jsonl)
    summary.md            the same table in Markdown (4 significant digits)

`--prune_drop 3` skips the trials of a setting (overrides minus the seed and the `task.` keys,
`--prune_across`) once one of its finished runs ends more than 3 points of held-out accuracy
below its own best evaluation: the rule a new default must meet, which that setting can no
longer meet (`jaxrl_llm.launch_prune`); `--prune_entropy 0.333` also skips it once one of its runs
keeps less than a third of its first sampled-token entropy (what a new default
must keep), `--prune_entropy_max 2` once one ends above twice it (a blow-up). Local launcher only;
order the sweep setting by setting. `--only 25-29,36` runs just those trials of the plan (their
indices, the NNN of their names), in the order given, the others left as they are: to give a
promising setting its remaining seeds first.

A trial whose `summary.json` already records the configured number of steps is reused, not rerun;
any other trial runs and resumes from its latest checkpoint. `--launcher xmanager` sends the same
trials through XManager's local API (`xm_local`) as local binaries: no Docker is needed for that,
but XManager must be importable (see README, "Research workflow").

Here: the command line, `launch` and the summary tables. The plan (trials, their commands,
sweep.json) is `jaxrl_llm.launch_plan`; running the trials, `jaxrl_llm.launch_backends`.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxrl_llm import sweeps as sweeps_lib
from jaxrl_llm.launch_backends import TrialResult, run_local, run_xmanager
from jaxrl_llm.launch_plan import Trial, parse_value, plan, write_plan
from jaxrl_llm.launch_prune import setting_pruner
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.user_imports import add_import_option

__all__ = [
    "SUMMARY_METRICS",
    "final_metrics",
    "launch",
    "build_parser",
    "main",
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
    """Plans, runs and summarises a sweep (see the module docstring for the layout); with
    `prune_drop`, `prune_entropy` or `prune_entropy_max`, the trials of a setting that can no
    longer qualify are skipped (`launch_prune.setting_pruner`); with `only`, just the trials of
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


def build_parser() -> argparse.ArgumentParser:
    """The command line's options, each with its help text."""
    parser = argparse.ArgumentParser(
        prog="python -m jaxrl_llm.launch",
        description=" ".join(__doc__.split("\n\n")[0].split()),
        allow_abbrev=False,
    )
    parser.add_argument("--config", required=True, help="experiment config file with get_config()")
    parser.add_argument(
        "--sweep", default=None, help="sweep file with sweep() -> list of override dicts"
    )
    parser.add_argument(
        "--seeds",
        default=None,
        help="run every trial (or, without --sweep, the config itself) once per seed: 0,1,2",
    )
    parser.add_argument(
        "--sweep_dir", required=True, help="parent directory of the trials' workdirs"
    )
    parser.add_argument(
        "--parallel", type=int, default=1, help="trials running at once (default %(default)s)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override shared by all trials (repeatable), e.g. train.num_steps=8",
    )
    parser.add_argument("--gin_file", action="append", default=[], help="gin file for every trial")
    parser.add_argument(
        "--gin_bindings", action="append", default=[], help="gin binding for every trial"
    )
    add_import_option(
        parser,
        "a module or .py file registering what the config names (a task, reward, scorer, "
        "algorithm); imported here and by every trial; repeatable",
    )
    parser.add_argument(
        "--launcher",
        choices=("local", "xmanager"),
        default="local",
        help="where trials run: local (subprocesses on this machine, the default) or xmanager "
        "(one XManager experiment, a job per trial)",
    )
    parser.add_argument(
        "--python", default=None, help="interpreter of the trials (default: this one)"
    )
    parser.add_argument(
        "--rerun", action="store_true", help="run trials that already finished again"
    )
    parser.add_argument(
        "--dry_run", action="store_true", help="validate and print the commands only"
    )
    parser.add_argument(
        "--prune_drop",
        type=float,
        default=None,
        metavar="POINTS",
        help="skip a setting's trials once one of its runs ends POINTS of held-out accuracy "
        "below its best, e.g. 3 (off by default)",
    )
    parser.add_argument(
        "--prune_entropy",
        type=float,
        default=None,
        metavar="RATIO",
        help="skip a setting's trials once one of its runs keeps under RATIO of its first "
        "sampled entropy, e.g. 0.333 (off by default)",
    )
    parser.add_argument(
        "--prune_entropy_max",
        type=float,
        default=None,
        metavar="RATIO",
        help="skip a setting's trials once one of its runs ends above RATIO times its first "
        "sampled entropy, e.g. 2: a blow-up (off by default)",
    )
    parser.add_argument(
        "--only",
        default=None,
        metavar="INDICES",
        help="run only these trials of the plan, in this order, e.g. 42,25-29 (local launcher)",
    )
    parser.add_argument(
        "--prune_across",
        default="task.",
        help="comma-separated key prefixes a setting spans (default: task.)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); exit status 1 if any trial failed."""
    parser = build_parser()
    args = parser.parse_args(argv)

    base = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        base[key.removeprefix("config.")] = parse_value(value)
    try:
        if args.sweep is None and args.seeds is None:
            parser.error("give --sweep FILE, --seeds 0,1,2, or both")
        trials = [{}] if args.sweep is None else sweeps_lib.load_sweep(args.sweep)
        if args.seeds is not None:
            trials = sweeps_lib.with_seeds(trials, sweeps_lib.parse_seeds(args.seeds))
        if args.dry_run:
            for t in plan(
                args.config,
                trials,
                args.sweep_dir,
                base=base,
                gin_files=args.gin_file,
                gin_bindings=args.gin_bindings,
                python=args.python,
                imports=args.imports,
            ):
                print(f"{t.name}: {shlex.join(t.argv)}")
            return 0
        results = launch(
            args.config,
            trials,
            args.sweep_dir,
            parallel=args.parallel,
            launcher=args.launcher,
            base=base,
            gin_files=args.gin_file,
            gin_bindings=args.gin_bindings,
            python=args.python,
            rerun=args.rerun,
            prune_drop=args.prune_drop,
            prune_entropy=args.prune_entropy,
            prune_entropy_max=args.prune_entropy_max,
            prune_across=tuple(filter(None, args.prune_across.split(","))),
            only=None if args.only is None else sweeps_lib.parse_int_list(args.only, flag="--only"),
            imports=args.imports,
        )
    except (FileNotFoundError, AttributeError, TypeError, ValueError, KeyError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = [r.trial.name for r in results if r.status == "failed"]
    if failed:
        print(
            f"[launch] {len(failed)} trial(s) failed: {', '.join(failed)} (see their log.txt)",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
