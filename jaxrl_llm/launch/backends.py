"""Running a sweep's trials: local subprocesses, or work units of one XManager experiment.

    results = run_local(trials, parallel=2)          # [TrialResult], in the trials' order
    results = run_xmanager(trials, parallel=2)       # needs XManager (README, "Research workflow")

Each trial's stdout and stderr go to `<workdir>/log.txt`; a trial that finished earlier
(`plan.is_finished`) is reused unless `rerun`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from jaxrl_llm.launch.plan import Trial, is_finished

__all__ = ["LOG_FILE", "RETURNCODE_FILE", "TrialResult", "run_local", "run_xmanager", "xm_job_args"]

LOG_FILE = "log.txt"
RETURNCODE_FILE = "returncode"


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """How a trial ended: status "ok", "failed", "reused" (finished by an earlier launch),
    "pruned" (skipped by `run_local`'s `skip`, `jaxrl_llm.launch.prune`) or "not selected" (left
    out by its `select`, `launch --only`)."""

    trial: Trial
    status: str
    returncode: int | None
    seconds: float


def run_local(
    trials: Sequence[Trial],
    *,
    parallel: int = 1,
    env: Mapping[str, str] | None = None,
    rerun: bool = False,
    poll_s: float = 0.2,
    log: Callable[[str], None] = print,
    skip: Callable[[Trial], str | None] | None = None,
    select: Callable[[Trial], bool] | None = None,
) -> list[TrialResult]:
    """Runs trials as local subprocesses, at most `parallel` at once; returns results in order.

    Each trial writes stdout and stderr to `workdir/log.txt`. On an exception (Ctrl-C included)
    the running trials are terminated (their process groups) before it propagates. `skip`, asked
    as each unfinished trial comes up, returns why not to run it (status "pruned") or None;
    an unfinished trial `select` rejects is not run (status "not selected").
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
                if select is not None and not select(trial):
                    results[trial.index] = TrialResult(trial, "not selected", None, 0.0)
                    continue
                reason = skip(trial) if skip is not None else None
                if reason is not None:
                    results[trial.index] = TrialResult(trial, "pruned", None, 0.0)
                    log(f"[launch] trial {trial.name}: pruned ({reason})")
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
