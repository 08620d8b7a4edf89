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

A trial whose `summary.json` already records the configured number of steps is reused, not rerun;
any other trial runs and resumes from its latest checkpoint. `--launcher xmanager` sends the same
trials through XManager's local API (`xm_local`) as local binaries: no Docker is needed for that,
but XManager must be importable (see README, "Research workflow").
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import csv
import dataclasses
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxrl_llm import sweeps as sweeps_lib
from jaxrl_llm.metrics import read_metrics

LOG_FILE = "log.txt"
RETURNCODE_FILE = "returncode"
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


@dataclasses.dataclass(frozen=True)
class Trial:
    """One planned run of a sweep.

    Attributes:
      index: position in the sweep.
      name: directory name (`003_advantage=rloo`).
      overrides: the sweep's dict for this trial (config keys and `gin/` bindings).
      workdir: the run directory.
      argv: the full command line.
      num_steps: the configured RL steps (a finished trial's summary.json records them).
    """

    index: int
    name: str
    overrides: dict[str, Any]
    workdir: str
    argv: tuple[str, ...]
    num_steps: int | None = None


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """How a trial ended: status "ok", "failed" or "reused" (finished by an earlier launch)."""

    trial: Trial
    status: str
    returncode: int | None
    seconds: float


def flag_value(value: Any) -> str:
    """A config value as `--config.a.b=` expects it (strings raw, bools lower-case, floats exact)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return repr(value)


def parse_value(text: str) -> Any:
    """`--set key=value` values: a Python literal (1, 0.5, True, 'x', (1, 2)) or else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def trial_command(
    config_path: str,
    workdir: str,
    overrides: Mapping[str, Any],
    *,
    gin_files: Sequence[str] = (),
    gin_bindings: Sequence[str] = (),
    python: str | None = None,
) -> list[str]:
    """The `python -m jaxrl_llm.main` command line of one trial (shared gin first, trial's after)."""
    config_overrides, trial_bindings = sweeps_lib.split(overrides)
    if python and os.sep in python:
        python = os.path.abspath(python)  # trials may start elsewhere (XManager's shell)
    argv = [
        python or sys.executable,
        "-m",
        "jaxrl_llm.main",
        "--config",
        os.path.abspath(config_path),
    ]
    argv += ["--workdir", os.path.abspath(workdir), "--no_progress"]
    argv += [f"--config.{k}={flag_value(v)}" for k, v in config_overrides.items()]
    argv += [f"--gin_file={os.path.abspath(f)}" for f in gin_files]
    argv += [f"--gin_bindings={b}" for b in [*gin_bindings, *trial_bindings]]
    return argv


def plan(
    config_path: str,
    trials: Sequence[Mapping[str, Any]],
    sweep_dir: str,
    *,
    base: Mapping[str, Any] | None = None,
    gin_files: Sequence[str] = (),
    gin_bindings: Sequence[str] = (),
    python: str | None = None,
) -> list[Trial]:
    """Validates every trial's config and lays the sweep out under `sweep_dir`.

    Args:
      config_path: the experiment's config file (`get_config()`).
      trials: the sweep, a list of override dicts.
      sweep_dir: parent of the trials' workdirs.
      base: config overrides shared by all trials (a trial's own value wins).
      gin_files, gin_bindings: gin configuration shared by all trials.
      python: the interpreter that runs trials (default: this one).

    Returns:
      The trials, in sweep order.
    """
    base = dict(base or {})
    configs = sweeps_lib.check_trials(config_path, trials, base)
    planned = []
    for i, (overrides, config) in enumerate(zip(trials, configs, strict=True)):
        merged = {**base, **overrides}
        name = sweeps_lib.trial_name(i, overrides)
        workdir = os.path.abspath(os.path.join(sweep_dir, name))
        argv = trial_command(
            config_path,
            workdir,
            merged,
            gin_files=gin_files,
            gin_bindings=gin_bindings,
            python=python,
        )
        planned.append(
            Trial(i, name, dict(overrides), workdir, tuple(argv), config.train.num_steps)
        )
    return planned


def write_plan(sweep_dir: str, config_path: str, trials: Sequence[Trial], **extra: Any) -> str:
    """Writes `sweep_dir/sweep.json` (what `jaxrl_llm.plots` reads to label a sweep's trials)."""
    os.makedirs(sweep_dir, exist_ok=True)
    path = os.path.join(sweep_dir, "sweep.json")
    payload = {
        "config": os.path.abspath(config_path),
        **extra,
        "trials": [
            {
                "index": t.index,
                "name": t.name,
                "overrides": t.overrides,
                "workdir": t.workdir,
                "command": shlex.join(t.argv),
            }
            for t in trials
        ],
    }
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=repr)
    return path


def is_finished(trial: Trial) -> bool:
    """True when the trial's summary.json records its configured number of steps."""
    path = os.path.join(trial.workdir, "summary.json")
    if trial.num_steps is None or not os.path.exists(path):
        return False
    with open(path) as f:
        return json.load(f).get("steps") == trial.num_steps


def run_local(
    trials: Sequence[Trial],
    *,
    parallel: int = 1,
    env: Mapping[str, str] | None = None,
    rerun: bool = False,
    poll_s: float = 0.2,
    log: Callable[[str], None] = print,
) -> list[TrialResult]:
    """Runs trials as local subprocesses, at most `parallel` at once; returns results in order.

    Each trial writes stdout and stderr to `workdir/log.txt`. On an exception (Ctrl-C included)
    the running trials are terminated (their process groups) before it propagates.
    """
    if parallel < 1:
        raise ValueError(f"launch: parallel={parallel} must be >= 1.")
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    pending, running, results = list(trials), {}, {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                trial = pending.pop(0)
                if not rerun and is_finished(trial):
                    results[trial.index] = TrialResult(trial, "reused", None, 0.0)
                    log(f"[launch] trial {trial.name}: finished earlier, reused")
                    continue
                os.makedirs(trial.workdir, exist_ok=True)
                out = open(os.path.join(trial.workdir, LOG_FILE), "a")
                proc = subprocess.Popen(
                    trial.argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    start_new_session=True,
                )
                running[proc] = (trial, time.time(), out)
                log(
                    f"[launch] trial {trial.name}: started (pid {proc.pid}, {len(running)} running)"
                )
            for proc in list(running):
                if proc.poll() is None:
                    continue
                trial, start, out = running.pop(proc)
                out.close()
                status = "ok" if proc.returncode == 0 else "failed"
                results[trial.index] = TrialResult(
                    trial, status, proc.returncode, time.time() - start
                )
                log(
                    f"[launch] trial {trial.name}: {status} (exit {proc.returncode}, {time.time() - start:.0f}s)"
                )
            if running:
                time.sleep(poll_s)
    finally:
        for proc, (trial, _, out) in running.items():
            _terminate(proc)
            out.close()
            log(f"[launch] trial {trial.name}: terminated")
    return [results[t.index] for t in trials]


def _terminate(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def xm_job_args(trial: Trial) -> list[str]:
    """The `/bin/sh -c` arguments of a trial as an XManager local binary (log and exit code kept)."""
    log_path = os.path.join(trial.workdir, LOG_FILE)
    rc_path = os.path.join(trial.workdir, RETURNCODE_FILE)
    script = (
        f"mkdir -p {shlex.quote(trial.workdir)} && {shlex.join(trial.argv)} >> {shlex.quote(log_path)} 2>&1; "
        f"rc=$?; echo $rc > {shlex.quote(rc_path)}; exit $rc"
    )
    return ["-c", script]


def run_xmanager(
    trials: Sequence[Trial],
    *,
    parallel: int = 1,
    title: str = "jaxrl_llm sweep",
    rerun: bool = False,
    log: Callable[[str], None] = print,
) -> list[TrialResult]:
    """Runs trials as work units of one XManager experiment (local executor), `parallel` at once.

    Each trial is an `xm.binary` (`/bin/sh -c "python -m jaxrl_llm.main ..."`) on `xm_local.Local()`:
    packaging a prebuilt binary needs neither Docker nor Bazel. XManager records the experiment in
    its local database (`~/.xmanager/experiments.sqlite3`).
    """
    try:
        from absl import flags
        from xmanager import xm, xm_local
    except ImportError as e:
        raise ImportError(
            f"--launcher xmanager needs XManager ({e}). Its pins (protobuf<7) conflict with "
            "constraints.txt: install it in a separate launcher venv (README, 'Research workflow')."
        ) from e
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()  # xm_local reads its absl flags' defaults

    results: dict[int, TrialResult] = {}

    async def _run() -> None:
        try:
            await _experiment()
        except Exception as e:  # on exit XManager re-raises a failed job's error: already recorded
            if len(results) < len(trials):
                raise
            log(f"[launch] XManager: {type(e).__name__}: {e}")

    async def _experiment() -> None:
        async with xm_local.create_experiment(experiment_title=title) as experiment:
            [executable] = experiment.package(
                [xm.binary(executor_spec=xm_local.LocalSpec(), path="/bin/sh")]
            )
            gate = asyncio.Semaphore(parallel)

            async def one(trial: Trial) -> None:
                if not rerun and is_finished(trial):
                    results[trial.index] = TrialResult(trial, "reused", None, 0.0)
                    return
                async with gate:
                    start = time.time()
                    os.makedirs(trial.workdir, exist_ok=True)
                    rc_path = os.path.join(trial.workdir, RETURNCODE_FILE)
                    if os.path.exists(rc_path):
                        os.remove(rc_path)
                    log(f"[launch] trial {trial.name}: started (xmanager)")
                    unit = await experiment.add(
                        xm.Job(executable, executor=xm_local.Local(), args=xm_job_args(trial))
                    )
                    try:
                        await unit.wait_until_complete()
                    except Exception as e:  # a non-zero exit surfaces as an XManager error
                        log(f"[launch] trial {trial.name}: {type(e).__name__}: {e}")
                    rc = int(open(rc_path).read()) if os.path.exists(rc_path) else None
                    status = "ok" if rc == 0 else "failed"
                    results[trial.index] = TrialResult(trial, status, rc, time.time() - start)
                    log(
                        f"[launch] trial {trial.name}: {status} (exit {rc}, work unit {unit.work_unit_id})"
                    )

            await asyncio.gather(*(one(t) for t in trials))
            log(f"[launch] XManager experiment {experiment.experiment_id}")

    asyncio.run(_run())
    return [results[t.index] for t in trials]


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
    log: Callable[[str], None] = print,
) -> list[TrialResult]:
    """Plans, runs and summarises a sweep (see the module docstring for the layout).

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
    if launcher == "local":
        results = run_local(planned, parallel=parallel, env=env, rerun=rerun, log=log)
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


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); exit status 1 if any trial failed."""
    parser = argparse.ArgumentParser(
        prog="python -m jaxrl_llm.launch", description=__doc__.split("\n")[0], allow_abbrev=False
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
    parser.add_argument("--parallel", type=int, default=1, help="trials running at once")
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
    parser.add_argument("--launcher", choices=("local", "xmanager"), default="local")
    parser.add_argument(
        "--python", default=None, help="interpreter of the trials (default: this one)"
    )
    parser.add_argument(
        "--rerun", action="store_true", help="run trials that already finished again"
    )
    parser.add_argument(
        "--dry_run", action="store_true", help="validate and print the commands only"
    )
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
