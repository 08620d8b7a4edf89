"""Fault injection on the tiny model: each fault a long run meets, what the run does, and that
nothing trained before the fault is lost.

Every case compares against an uninterrupted run of the same config (metrics are deterministic
per (seed, step, data position, state)). A new runner or algorithm joins the checkpoint cases by
adding one entry to `RUNS`.
"""

import errno
import os
import shutil
import signal
import subprocess
import textwrap
import threading
import time

import numpy as np
import orbax.checkpoint as ocp
import pytest

from jaxrl_llm import checkpoint
from jaxrl_llm.checkpoint import CheckpointSaveError, CheckpointSpaceError
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.rewards import RewardRunner
from jaxrl_llm.runners import components, hooks, train
from jaxrl_llm.stages import load_config
from tests.run_helpers import assert_same_steps, rows_by_step, start_main, wait_for_step

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The asynchronous runner's corrupt-checkpoint case is slow (default coverage: its empty step
# directory case below, which resumes it from a checkpoint, and the grpo cases).
RUNS = [
    pytest.param("experiments/configs/grpo_tiny.py", id="grpo"),
    pytest.param("experiments/configs/ppo_tiny.py", id="ppo"),
    pytest.param("experiments/configs/grpo_async_tiny.py", id="grpo_async", marks=pytest.mark.slow),
]
# One PPO case runs by default (the corrupt checkpoint); the empty step directory's is slow.
EMPTY_STEP_RUNS = [
    RUNS[0],
    pytest.param("experiments/configs/ppo_tiny.py", id="ppo", marks=pytest.mark.slow),
    pytest.param("experiments/configs/grpo_async_tiny.py", id="grpo_async"),
]
STEPS = 4


def _config(path, steps=STEPS, **overrides):
    return load_config(
        os.path.join(ROOT, path),
        {
            "train.num_steps": steps,
            "train.checkpoint_every": 1,
            "eval.before": False,
            "eval.after": False,
            **overrides,
        },
    )


def _assert_same_steps(got_dir, want_dir, steps=STEPS):
    assert_same_steps(got_dir, want_dir, steps)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One uninterrupted run per config, shared by the cases."""
    cache = {}

    def get(path):
        if path not in cache:
            workdir = tmp_path_factory.mktemp("uninterrupted")
            train(_config(path), str(workdir), progress=False)
            cache[path] = workdir
        return cache[path]

    return get


def _scribble(directory):
    """Overwrites every file under `directory` with random bytes (a bad disk, a torn write)."""
    rng = np.random.default_rng(0)
    for root, _, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "wb") as f:
                f.write(rng.bytes(64))


@pytest.mark.parametrize("path", RUNS)
def test_corrupt_newest_checkpoint_is_moved_aside_and_the_run_finishes(
    tmp_path, path, uninterrupted, capsys
):
    """The issue's repro: 2 steps, step 2's files scribbled over, then 4 steps."""
    train(_config(path, steps=2), str(tmp_path), progress=False)
    _scribble(tmp_path / "checkpoints" / "2")
    train(_config(path), str(tmp_path), progress=False)
    out = capsys.readouterr().out
    assert "checkpoint 2 could not be restored" in out and "resumed from" in out
    [moved] = os.listdir(tmp_path / "checkpoints_quarantine")
    assert moved.startswith("2-")  # kept for inspection
    assert sorted(int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit())[-1] == 4
    faults = [r for r in read_metrics(str(tmp_path)) if "fault/quarantined_checkpoints" in r]
    assert faults == [{"step": 1, "fault/quarantined_checkpoints": 1.0}]
    _assert_same_steps(tmp_path, uninterrupted(path))


@pytest.mark.parametrize("path", EMPTY_STEP_RUNS)
def test_empty_step_directory_is_moved_aside(tmp_path, path, uninterrupted):
    train(_config(path, steps=2), str(tmp_path), progress=False)
    os.makedirs(tmp_path / "checkpoints" / "3")  # a crash right after mkdir
    train(_config(path), str(tmp_path), progress=False)
    assert any(d.startswith("3-") for d in os.listdir(tmp_path / "checkpoints_quarantine"))
    _assert_same_steps(tmp_path, uninterrupted(path))


def test_torn_last_metrics_line_is_cut_off_and_kept(tmp_path, uninterrupted):
    path = "experiments/configs/grpo_tiny.py"
    train(_config(path, steps=2), str(tmp_path), progress=False)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward/me')  # killed mid-write
    assert len(read_metrics(str(tmp_path))) == 2  # the reader skips it too
    train(_config(path), str(tmp_path), progress=False)
    assert open(tmp_path / "metrics.jsonl.torn").read() == '{"step": 3, "reward/me\n'
    _assert_same_steps(tmp_path, uninterrupted(path))


def _raises(prompt, completion, example):
    raise RuntimeError("verifier crashed")


# A hung verifier waits on this (set when the test is done, so its abandoned threads end).
_HANG_RELEASE = threading.Event()
HANG_S = 120.0  # how long a hung call would hold a run that waited for it


def _hangs(prompt, completion, example):
    _HANG_RELEASE.wait(HANG_S)
    return 1.0


def test_reward_functions_that_raise_hang_or_return_junk_score_zero(tmp_path, monkeypatch):
    functions = {
        "task": lambda p, c, e: 1.0,
        "raises": _raises,
        "hangs": _hangs,
        "nan": lambda p, c, e: float("nan"),
        "string": lambda p, c, e: "high",
    }
    monkeypatch.setattr(
        components, "build_rewards", lambda config: RewardRunner(functions, timeout_s=0.3)
    )
    _HANG_RELEASE.clear()
    t0 = time.time()
    try:
        summary = train(
            _config("experiments/configs/grpo_tiny.py", steps=1), str(tmp_path), progress=False
        )
        elapsed = time.time() - t0
    finally:
        _HANG_RELEASE.set()
    # the hung calls were abandoned: a run that waited for them would take HANG_S or more (the
    # run itself took 5-27 s, the longest beside a training job)
    assert summary["steps"] == 1 and elapsed < HANG_S - 20
    [row] = read_metrics(str(tmp_path))
    assert row["reward/timeouts"] == 8  # 8 completions, "hangs" timed out on each
    assert row["reward/errors"] == 3 * 8  # raises, nan, string
    assert row["reward/mean"] == 1.0  # only the task reward counted


def test_nan_loss_at_a_chosen_step_skips_that_update_only(tmp_path, monkeypatch, uninterrupted):
    from jaxrl_llm.algorithms import grpo

    path = "experiments/configs/grpo_tiny.py"
    real, calls = grpo.group_advantages, []

    def poisoned(rewards, group, **kw):
        calls.append(1)
        adv = real(rewards, group, **kw)
        return np.full_like(adv, np.nan) if len(calls) == 3 else adv

    monkeypatch.setattr(grpo, "group_advantages", poisoned)
    train(_config(path), str(tmp_path), progress=False)
    rows = rows_by_step(tmp_path)
    assert [rows[s]["train/nonfinite"] for s in (1, 2, 3, 4)] == [0.0, 0.0, 1.0, 0.0]
    want = rows_by_step(uninterrupted(path))
    for step in (1, 2):  # before the fault: identical
        np.testing.assert_allclose(rows[step]["train/entropy"], want[step]["train/entropy"])
    steps = sorted(int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit())
    assert steps == [1, 2, 4]  # the skipped step 3 was not saved


def test_disk_full_when_saving_stops_with_the_intact_checkpoint_named(
    tmp_path, monkeypatch, uninterrupted
):
    path = "experiments/configs/grpo_tiny.py"
    real_save = ocp.CheckpointManager.save

    def save(self, step, *args, **kwargs):
        if step == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    with pytest.raises(CheckpointSaveError, match="Newest intact checkpoint: step 2"):
        train(_config(path), str(tmp_path), progress=False)
    monkeypatch.setattr(ocp.CheckpointManager, "save", real_save)
    train(_config(path), str(tmp_path), progress=False)  # space freed: the same command resumes
    _assert_same_steps(tmp_path, uninterrupted(path))


def test_disk_too_small_for_the_checkpoints_stops_the_run_before_its_first_step(
    tmp_path, monkeypatch, uninterrupted
):
    path = "experiments/configs/grpo_tiny.py"
    real = checkpoint.shutil.disk_usage
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    with pytest.raises(CheckpointSpaceError, match=r"keep_checkpoints=3: this run will write 4 "):
        train(_config(path, **{"eval.before": True}), str(tmp_path), progress=False)
    assert read_metrics(str(tmp_path)) == []  # stopped before the evaluation and any step
    monkeypatch.undo()
    # space freed (here: fewer checkpoints kept): the same run, and only the newest is left
    train(_config(path, **{"train.keep_checkpoints": 1}), str(tmp_path), progress=False)
    _assert_same_steps(tmp_path, uninterrupted(path))
    assert os.listdir(tmp_path / "checkpoints") == [str(STEPS)]


def _cli(workdir, *extra, script=None):
    return start_main(
        "experiments/configs/grpo_tiny.py",
        workdir,
        f"--config.train.num_steps={STEPS}",
        "--config.eval.before=False",
        "--config.eval.after=False",
        *extra,
        script=script,
    )


def test_sigterm_between_the_checkpoint_and_the_step_end_saves_the_next_step(tmp_path):
    """A signal that lands after the checkpoint hook of step 1 decided not to save (here: from
    the metrics hook) must not end the run unsaved: it stops after step 2, which is saved."""
    config = _config("experiments/configs/grpo_tiny.py", **{"train.checkpoint_every": 100})

    class SignalAfterStepOne(hooks.Hook):
        def on_step(self, run, record):
            if record.step == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    run_hooks = hooks.default_hooks(config, str(tmp_path), desc="GRPO", progress=False)
    run_hooks.insert(1, SignalAfterStepOne())  # after the checkpoint hook
    summary = train(config, str(tmp_path), progress=False, hooks=run_hooks)
    assert summary["stopped_by"] == "SIGTERM" and summary["steps"] == 2
    saved = sorted(int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit())
    assert saved == [2] and len(rows_by_step(tmp_path)) == 2


# Slow (default coverage: test_sigterm_between_the_checkpoint_and_the_step_end_saves_the_next_step,
# and test_grpo_run.py::test_sigkill_and_resume_reproduces_every_later_step for the CLI resume).
@pytest.mark.slow
def test_sigterm_saves_the_current_step_and_exits_cleanly(tmp_path, uninterrupted):
    workdir = tmp_path / "run"
    proc = _cli(workdir, "--config.train.checkpoint_every=100")
    wait_for_step(workdir, proc, 1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert "SIGTERM received" in out
    saved = sorted(int(d) for d in os.listdir(workdir / "checkpoints") if d.isdigit())
    stopped_at = len(rows_by_step(workdir))
    assert saved == [stopped_at] and stopped_at < STEPS  # saved although not a multiple of 100
    resumed = _cli(workdir, "--config.train.checkpoint_every=100")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0 and "resumed from" in out, out
    _assert_same_steps(workdir, uninterrupted("experiments/configs/grpo_tiny.py"))


_KILL_DURING_SAVE = textwrap.dedent(
    """
    import os, signal, sys
    import orbax.checkpoint as ocp
    from jaxrl_llm import checkpoint, main

    def save(self, step, state, metadata):
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), metadata=ocp.args.JsonSave(metadata)), force=True)
        if step == 2:  # the write has started; die before it is finalised
            os.kill(os.getpid(), signal.SIGKILL)
        self.manager.wait_until_finished()

    checkpoint.Checkpointer.save = save
    sys.argv = ["jaxrl_llm.main"] + sys.argv[1:]
    main.cli()
    """
)


@pytest.mark.slow  # default coverage: test_corrupt_newest_checkpoint_is_moved_aside_and_the_run_finishes[grpo], test_grpo_run.py::test_sigkill_and_resume_reproduces_every_later_step
def test_sigkill_during_a_checkpoint_save_resumes_from_the_last_good_one(tmp_path, uninterrupted):
    workdir = tmp_path / "run"
    victim = _cli(workdir, "--config.train.checkpoint_every=1", script=_KILL_DURING_SAVE)
    victim.communicate(timeout=600)
    assert victim.returncode == -signal.SIGKILL
    resumed = _cli(workdir, "--config.train.checkpoint_every=1")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "resumed from" in out
    _assert_same_steps(workdir, uninterrupted("experiments/configs/grpo_tiny.py"))


def test_cli_user_errors_are_one_line_and_debug_keeps_the_traceback(tmp_path):
    proc = _cli(tmp_path, "--config.model.name=/no/such/model.gguf")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert "Traceback" not in out
    assert out.strip().splitlines()[-1].startswith("error: '/no/such/model.gguf' is neither")
    proc = _cli(tmp_path, "--config.model.name=/no/such/model.gguf", "--debug")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0 and "Traceback" in out


@pytest.fixture
def small_filesystem(tmp_path):
    """A 14 MB tmpfs (the tiny model's checkpoint is 6 MB on disk, 19 MB by the check's
    uncompressed count); skips where mounting is not permitted (it needs root, as on CI's
    machine)."""
    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=14m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here: {made.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


class _FillDiskAfter(hooks.Hook):
    """Another writer: after step `step` (its checkpoint saved) it fills the disk under
    `directory` to `leave` free bytes, with a file `filler` there."""

    def __init__(self, directory, *, step, leave):
        self.filler = os.path.join(directory, "filler")
        self.step, self.leave = step, leave

    def on_step(self, run, record):
        if record.step == self.step:
            free = shutil.disk_usage(os.path.dirname(self.filler)).free
            with open(self.filler, "wb") as f:  # written, not sparse: tmpfs counts the pages
                f.write(b"\0" * (free - self.leave))


# Default coverage, with the disk faked: test_disk_full_when_saving_stops_with_the_intact_
# checkpoint_named and test_disk_too_small_for_the_checkpoints_stops_the_run_before_its_first_step.
@pytest.mark.slow
def test_real_full_disk_then_more_space_resumes(small_filesystem, uninterrupted):
    path = "experiments/configs/grpo_tiny.py"
    workdir = small_filesystem / "run"
    # Too small from the start: refused before the first step, by the real disk's figure.
    with pytest.raises(CheckpointSpaceError, match=r"keep_checkpoints=3: this run will write 4 "):
        train(_config(path), str(workdir), progress=False)
    assert read_metrics(str(workdir)) == []
    # Room at the start, then the disk fills while the run goes on: the kernel's ENOSPC at
    # step 3's save, the step-2 checkpoint intact.
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_filesystem)], check=True)
    config = _config(path, **{"train.keep_checkpoints": 1})
    filler = _FillDiskAfter(small_filesystem, step=2, leave=1_000_000)
    run_hooks = [*hooks.default_hooks(config, str(workdir), desc="fill", progress=False), filler]
    with pytest.raises(CheckpointSaveError, match="Newest intact checkpoint: step 2"):
        train(config, str(workdir), progress=False, hooks=run_hooks)
    assert rows_by_step(workdir).keys() == {
        1,
        2,
    }  # the checkpoint hook runs before the metrics hook
    os.remove(filler.filler)  # space freed: the same command resumes
    train(config, str(workdir), progress=False)
    _assert_same_steps(workdir, uninterrupted(path))
