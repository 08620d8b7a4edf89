"""The asynchronous runner as two processes of one jax.distributed run (4 CPU devices each):
learner = process 0, generator = process 1, weights pulled through JAX's transfer server,
batches through the coordination service. In deterministic mode it reproduces the one-process
run's metrics step for step."""

import json
import os
import signal
import subprocess
import sys

import pytest

from jaxrl_llm.distributed import free_port
from jaxrl_llm.runners import train
from jaxrl_llm.stages import load_config
from tests.run_helpers import ROOT, assert_same_steps, rows_by_step, wait_for_step

ASYNC_TINY = os.path.join(ROOT, "experiments", "configs", "grpo_async_tiny.py")
STEPS = 4
OVERRIDES = {
    "train.num_steps": STEPS,
    "eval.before": False,
    "eval.after": False,
    "train.checkpoint_every": STEPS,
}


# main, with the tests' odd-length reward (tiny random models never solve the task, and zero
# rewards would make every update, hence every weight version, the same).
_MAIN = """
import sys
from jaxrl_llm.rewards import RewardRunner
from jaxrl_llm.runners import components
def odd_length(prompt, completion, example):
    return float(len(completion) % 2)
components.build_rewards = lambda config: RewardRunner({"task": odd_length}, timeout_s=None)
import os
from jaxrl_llm.runners.online_run import OnlineRun
real_generate = OnlineRun.generate
def failing_generate(self, step, params, **kwargs):
    if step == int(os.environ.get("FAIL_GENERATOR_AT", -1)) and os.environ["JAX_PROCESS_ID"] == "1":
        raise RuntimeError(f"generator broke at step {step}")
    return real_generate(self, step, params, **kwargs)
OnlineRun.generate = failing_generate
from jaxrl_llm.main import cli
sys.argv[0] = "jaxrl_llm.main"
cli()
"""


def _main(workdir, processes: int, flags=()) -> list[str]:
    main = [sys.executable, "-c", _MAIN, "--config", ASYNC_TINY, "--workdir", str(workdir)]
    main += ["--no_progress", f"--config.async_rl.processes={processes}"]
    return main + [f"--config.{k}={v}" for k, v in OVERRIDES.items()] + list(flags)


def _env(**extra) -> dict[str, str]:
    return dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        PYTHONUNBUFFERED="1",
        **extra,
    )


def _run(workdir, *flags, processes: int, timeout=900, env=None, ok=True):
    """The patched main on 4 CPU devices a process, as one process or as two through
    `python -m jaxrl_llm.distributed --num_processes 2 -- ...`."""
    main = _main(workdir, processes, flags)
    if processes == 2:
        main = [sys.executable, "-m", "jaxrl_llm.distributed", "--num_processes", "2", "--", *main]
    env = _env(**(env or {}))
    out = subprocess.run(main, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert (out.returncode == 0) == ok, out.stdout[-4000:] + out.stderr[-4000:]
    return out


@pytest.mark.slow  # default coverage: test_async_run.py::test_zero_staleness_reproduces_the_synchronous_runner, sharding/test_multiprocess.py
def test_two_processes_reproduce_the_one_process_run(tmp_path):
    one, two = tmp_path / "one_process", tmp_path / "two_processes"
    _run(one, processes=1)
    _run(two, processes=2)
    assert_same_steps(two, one, STEPS)
    rows = rows_by_step(two)
    assert any(abs(r["train/pg_loss"]) > 1e-4 for r in rows.values())  # the updates are not zero
    assert all(0 <= r["async/staleness"] <= 2 for r in rows.values())
    summary = json.loads((two / "summary.json").read_text())
    assert summary["async"]["staleness_histogram"] == {"0": 8, "1": 8, "2": 16}
    assert not (two / "generator" / "summary.json").exists()  # the learner alone writes


@pytest.mark.slow
def test_both_processes_killed_then_resumed_reproduce_the_run(tmp_path):
    reference, run = tmp_path / "reference", tmp_path / "killed"
    _run(reference, processes=1)
    port = str(free_port())
    procs = [
        subprocess.Popen(
            _main(run, 2, ["--config.train.checkpoint_every=1"]),
            cwd=ROOT,
            env=_env(
                JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                JAX_NUM_PROCESSES="2",
                JAX_PROCESS_ID=str(i),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    wait_for_step(run, procs[0], 2)
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    out = _run(run, "--config.train.checkpoint_every=1", processes=2)
    assert "resumed from" in out.stdout + out.stderr
    assert_same_steps(run, reference, STEPS)


@pytest.mark.slow  # the default run covers two processes with the reproduction test
def test_in_flight_updates_across_two_processes_respect_the_bound(tmp_path):
    _run(
        tmp_path,
        "--config.async_rl.deterministic=False",
        "--config.async_rl.inflight_updates=True",
        "--config.async_rl.inflight_chunk_tokens=2",
        processes=2,
    )
    rows = rows_by_step(tmp_path)
    assert sorted(rows) == list(range(1, STEPS + 1))
    for row in rows.values():
        assert 0 <= row["async/token_staleness"] <= row["async/staleness"] <= 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["async"]["inflight_updates"] is True


@pytest.mark.slow
def test_a_failing_generator_process_stops_the_learner_with_its_error(tmp_path):
    out = _run(tmp_path, processes=2, env={"FAIL_GENERATOR_AT": "2"}, ok=False)
    assert "generator broke at step 2" in out.stderr
    assert "the generator failed" in out.stderr  # the learner's error names the other side
    rows = rows_by_step(tmp_path)
    assert sorted(rows) == [1, 2]  # the batches generated before the failure were trained


def test_two_processes_need_a_distributed_run(tmp_path):
    config = load_config(ASYNC_TINY, {**OVERRIDES, "async_rl.processes": 2})
    with pytest.raises(ValueError, match="async_rl.processes=2 needs two processes"):
        train(config, str(tmp_path), progress=False)
