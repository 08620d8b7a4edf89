"""The asynchronous runner on 8 fake CPU devices (train mesh 2 x 2, rollout mesh 1 x 4): the
synchronous numbers at staleness 0, the bound on every sample at 1, 2 and 4, exact resume after
SIGKILL in deterministic mode, and a failing or stalled generator stopping the run."""

import json
import os
import signal
import subprocess
import sys
import time

import ml_collections
import numpy as np
import pytest

from jaxrl_llm.config import load_config
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import TIME_KEYS, train
from jaxrl_llm.runners.online_async import AsyncRun
from jaxrl_llm.runners.pipeline import PipelineError
from jaxrl_llm.runners.staleness import behaviour_version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")
ASYNC_TINY = os.path.join(ROOT, "experiments", "configs", "grpo_async_tiny.py")
SPLIT = ml_collections.ConfigDict(dict(mode="split", train_mesh=(2, 2), rollout_mesh=(1, 4)))


def _config(path=TINY, steps=4, **overrides):
    config = load_config(
        path,
        {"train.num_steps": steps, "eval.before": False, "eval.after": False, **overrides},
    )
    with config.unlocked():
        config.placement = SPLIT
    return config


def _rows(workdir):
    """Each step's last row without the process-dependent keys."""
    rows = {}
    for row in read_metrics(str(workdir)):
        if "train/rows" in row:
            rows[row["step"]] = {k: v for k, v in row.items() if k not in TIME_KEYS}
    return rows


def test_zero_staleness_reproduces_the_synchronous_runner(tmp_path, text_reward):
    sync_config = _config(steps=3, **{"loss.kl_beta": 0.05})
    train(sync_config, str(tmp_path / "sync"), progress=False)
    async_config = _config(steps=3, **{"loss.kl_beta": 0.05, "async_rl.enabled": True})
    with async_config.unlocked():
        async_config.async_rl.max_staleness = 0
    summary = train(async_config, str(tmp_path / "async"), progress=False)
    sync, asynchronous = _rows(tmp_path / "sync"), _rows(tmp_path / "async")
    assert sorted(sync) == sorted(asynchronous) == [1, 2, 3]
    assert any(abs(r["train/pg_loss"]) > 1e-4 for r in sync.values())  # the updates are not zero
    for step, want in sync.items():
        got = asynchronous[step]
        assert {k for k in got if not k.startswith("async/")} == set(want)
        assert got["async/staleness"] == 0 and got["async/version"] == step - 1
        for key, value in want.items():
            np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-7, err_msg=key)
    assert summary["async"]["staleness_histogram"] == {0: 3 * 8}


@pytest.mark.parametrize("k", [1, 2, 4])
def test_staleness_follows_the_schedule_and_never_exceeds_the_bound(tmp_path, text_reward, k):
    config = _config(
        steps=5,
        **{
            "async_rl.enabled": True,
            "async_rl.max_staleness": k,
            "off_policy.correction": "decoupled_ppo",
        },
    )
    summary = train(config, str(tmp_path), progress=False)
    rows = _rows(tmp_path)
    for step, row in rows.items():
        s = step - 1
        assert row["async/version"] == behaviour_version(s, k)
        assert row["async/staleness"] == min(s, k) <= k
    histogram = summary["async"]["staleness_histogram"]
    assert sum(histogram.values()) == 5 * 8 and max(histogram) == min(4, k)
    # Stale steps train on another policy's samples: the diagnostics see it.
    stale = [r for r in rows.values() if r["async/staleness"] > 0]
    assert stale and all(r["train/off_policy/kl_behaviour"] > 0 for r in stale)
    assert all(r["train/off_policy/ess"] <= 1.0 + 1e-6 for r in rows.values())


def test_free_running_generator_respects_the_bound(tmp_path, text_reward):
    config = _config(
        steps=5,
        **{"async_rl.enabled": True, "async_rl.max_staleness": 1, "async_rl.deterministic": False},
    )
    summary = train(config, str(tmp_path), progress=False)
    assert set(summary["async"]["staleness_histogram"]) <= {0, 1}
    assert all(0 <= r["async/staleness"] <= 1 for r in _rows(tmp_path).values())


def _main(workdir, *extra):
    cmd = [sys.executable, "-m", "jaxrl_llm.main", "--config", ASYNC_TINY]
    cmd += ["--workdir", str(workdir), "--no_progress", "--config.train.num_steps=6", *extra]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_sigkill_and_resume_reproduce_a_stale_run_exactly(tmp_path):
    reference = _main(tmp_path / "a")
    out, _ = reference.communicate(timeout=600)
    assert reference.returncode == 0, out
    victim = _main(tmp_path / "b")
    deadline = time.time() + 600
    while time.time() < deadline:
        rows = read_metrics(str(tmp_path / "b"))
        if rows and rows[-1]["step"] >= 4:  # checkpoint 3 holds versions 1 and 2 for later batches
            break
        if victim.poll() is not None:
            pytest.fail("the run ended before it could be killed:\n" + victim.stdout.read())
        time.sleep(0.1)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    resumed = _main(tmp_path / "b")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0 and "resumed from" in out, out
    want, got = _rows(tmp_path / "a"), _rows(tmp_path / "b")
    assert sorted(got) == sorted(want) == list(range(1, 7))
    for step in want:
        assert got[step].keys() == want[step].keys()
        for key in want[step]:
            np.testing.assert_allclose(got[step][key], want[step][key], rtol=1e-5, err_msg=key)
    with open(tmp_path / "b" / "summary.json") as f:
        assert sum(json.load(f)["async"]["staleness_histogram"].values()) == 6 * 8


def _failing_generator(fail_at, action):
    original = AsyncRun.generate

    def generate(self, step, params):
        if step == fail_at:
            action()
        return original(self, step, params)

    return generate


def _raise():
    raise ConnectionError("sandbox unreachable")


def test_a_generator_that_raises_stops_the_run_and_keeps_the_last_step(tmp_path, monkeypatch):
    monkeypatch.setattr(AsyncRun, "generate", _failing_generator(3, _raise))
    config = _config(
        steps=5,
        **{"async_rl.enabled": True, "async_rl.max_staleness": 0, "train.checkpoint_every": 100},
    )
    start = time.time()
    with pytest.raises(PipelineError, match=r"generator failed \(ConnectionError: sandbox"):
        train(config, str(tmp_path), progress=False)
    assert time.time() - start < 300
    assert os.listdir(tmp_path / "checkpoints") == ["3"]  # steps 1-3 trained, then saved
    assert max(_rows(tmp_path)) == 3


def test_a_stalled_generator_stops_the_run_within_the_timeout(tmp_path, monkeypatch, capsys):
    # The timeout must exceed the first learner step's compilation, which the generator waits on.
    monkeypatch.setattr(AsyncRun, "generate", _failing_generator(2, lambda: time.sleep(120)))
    config = _config(
        steps=4,
        **{
            "async_rl.enabled": True,
            "async_rl.max_staleness": 1,
            "async_rl.timeout_s": 20.0,
            "train.checkpoint_every": 100,
        },
    )
    with pytest.raises(
        PipelineError, match="the learner waited 20s for a batch from the generator"
    ):
        train(config, str(tmp_path), progress=False)
    assert "step 2 saved before stopping" in capsys.readouterr().out
