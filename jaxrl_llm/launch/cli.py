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
longer meet (`jaxrl_llm.launch.prune`); `--prune_entropy 0.333` also skips it once one of its runs
keeps less than a third of its first sampled-token entropy (what a new default
must keep), `--prune_entropy_max 2` once one ends above twice it (a blow-up). Local launcher only;
order the sweep setting by setting. `--only 25-29,36` runs just those trials of the plan (their
indices, the NNN of their names), in the order given, the others left as they are: to give a
promising setting its remaining seeds first.

A trial whose `summary.json` already records the configured number of steps is reused, not rerun;
any other trial runs and resumes from its latest checkpoint. `--launcher xmanager` sends the same
trials through XManager's local API (`xm_local`) as local binaries: no Docker is needed for that,
but XManager must be importable (see README, "Research workflow").

Here: the command line. It calls `jaxrl_llm.launch.sweep.launch`, which plans the trials
(`jaxrl_llm.launch.plan`), prunes them (`jaxrl_llm.launch.prune`), runs them
(`jaxrl_llm.launch.backends`) and writes the summary tables.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from jaxrl_llm import sweeps as sweeps_lib
from jaxrl_llm.launch.plan import parse_value, plan
from jaxrl_llm.launch.sweep import launch
from jaxrl_llm.user_imports import add_import_option

__all__ = ["build_parser", "main"]


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
