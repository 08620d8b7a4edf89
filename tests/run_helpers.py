"""Helpers of the tests that run training end to end: metrics by step, kill-and-resume."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import TIME_KEYS, is_process_dependent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_main(config_path: str, workdir, *flags: str, script: str | None = None):
    """`python -m jaxrl_llm.main --config CONFIG --workdir WORKDIR --no_progress FLAGS...` from
    the repository root, its output captured as text (a `subprocess.Popen`). With `script`,
    `python -c SCRIPT` gets the same arguments instead (a main patched for a fault)."""
    program = ["-m", "jaxrl_llm.main"] if script is None else ["-c", script]
    cmd = [sys.executable, *program, "--config", config_path]
    cmd += ["--workdir", str(workdir), "--no_progress", *flags]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def rows_by_step(workdir) -> dict[int, dict]:
    """The training row of each step, without the process-dependent keys
    (`is_process_dependent`: timings); fails when a step was logged twice (a resumed run moves
    what the killed process logged after its checkpoint to `metrics.jsonl.superseded`)."""
    rows = {}
    for row in read_metrics(str(workdir)):
        if "train/rows" in row:
            assert row["step"] not in rows, f"{workdir}: step {row['step']} logged twice"
            rows[row["step"]] = {k: v for k, v in row.items() if not is_process_dependent(k)}
    return rows


def wait_for_step(workdir, proc, step: int) -> None:
    """Returns once the run `proc` (writing to `workdir`) has logged `step`; fails the test
    when it ends earlier or takes over 10 minutes."""
    deadline = time.time() + 600
    while time.time() < deadline:
        rows = read_metrics(str(workdir))
        if rows and rows[-1]["step"] >= step:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before step {step} was logged:\n" + proc.stdout.read())
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for the run to log step {step}")


def kill_at_step_then_resume(start, workdir, step: int) -> str:
    """Starts `start()` (a `subprocess.Popen` of a run writing to `workdir`), SIGKILLs it once
    `step` is logged, runs `start()` again to the end, and returns that run's output."""
    victim = start()
    wait_for_step(workdir, victim, step)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    resumed = start()
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "resumed from" in out
    return out


def assert_same_steps(got_dir, want_dir, steps: int, rtol: float = 1e-5, atol: float = 1e-7):
    """Both runs logged steps 1..steps with the same keys and values."""
    got, want = rows_by_step(got_dir), rows_by_step(want_dir)
    assert sorted(got) == sorted(want) == list(range(1, steps + 1))
    for step in want:
        assert got[step].keys() == want[step].keys()
        for key in want[step]:
            np.testing.assert_allclose(
                got[step][key], want[step][key], rtol=rtol, atol=atol, err_msg=f"{step} {key}"
            )


def loss_rows_by_step(workdir) -> dict[int, dict]:
    """The rows with a `train/loss` of each step (a stage's or the online runner's), without
    the timings (`TIME_KEYS`)."""
    return {
        r["step"]: {k: v for k, v in r.items() if k not in TIME_KEYS}
        for r in read_metrics(str(workdir))
        if "train/loss" in r
    }


def assert_same_values(got: dict[int, dict], want: dict[int, dict], keys) -> None:
    """Both have the same steps, and at each the same values of `keys` (rtol 1e-5)."""
    assert sorted(got) == sorted(want)
    for step in want:
        for key in keys:
            np.testing.assert_allclose(got[step][key], want[step][key], rtol=1e-5, atol=1e-7)
