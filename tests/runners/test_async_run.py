"""The asynchronous runner on 8 fake CPU devices (train mesh 2 x 2, rollout mesh 1 x 4): the
synchronous numbers at staleness 0, the bound on every sample at 1, 2 and 4, exact resume after
SIGKILL in deterministic mode, and a failing or stalled generator stopping the run. k = 1 and 4
and the SIGKILL case are in the slow target."""

import json
import os
import time

import ml_collections
import numpy as np
import pytest

from jaxrl_llm.algorithms.staleness import behaviour_version
from jaxrl_llm.runners import restore_policy, train
from jaxrl_llm.runners.online_run import OnlineRun
from jaxrl_llm.runners.pipeline import PipelineError
from jaxrl_llm.stages import load_config
from tests.run_helpers import (
    ROOT,
    assert_same_steps,
    kill_at_step_then_resume,
    rows_by_step,
    start_main,
)

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


def test_zero_staleness_reproduces_the_synchronous_runner(tmp_path, text_reward):
    sync_config = _config(steps=3, **{"loss.kl_beta": 0.05})
    train(sync_config, str(tmp_path / "sync"), progress=False)
    async_config = _config(steps=3, **{"loss.kl_beta": 0.05, "async_rl.enabled": True})
    with async_config.unlocked():
        async_config.async_rl.max_staleness = 0
    summary = train(async_config, str(tmp_path / "async"), progress=False)
    sync, asynchronous = rows_by_step(tmp_path / "sync"), rows_by_step(tmp_path / "async")
    assert sorted(sync) == sorted(asynchronous) == [1, 2, 3]
    assert any(abs(r["train/pg_loss"]) > 1e-4 for r in sync.values())  # the updates are not zero
    for step, want in sync.items():
        got = asynchronous[step]
        assert {k for k in got if not k.startswith("async/")} == set(want)
        assert got["async/staleness"] == 0 and got["async/version"] == step - 1
        for key, value in want.items():
            np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-7, err_msg=key)
    assert summary["async"]["staleness_histogram"] == {0: 3 * 8}


@pytest.mark.parametrize(
    "k", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(4, marks=pytest.mark.slow)]
)
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
    rows = rows_by_step(tmp_path)
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
    # The checkpoint also holds the older weight versions; the policy still restores alone.
    assert restore_policy(str(tmp_path)).step == 5


def test_free_running_generator_respects_the_bound(tmp_path, text_reward):
    config = _config(
        steps=5,
        **{"async_rl.enabled": True, "async_rl.max_staleness": 1, "async_rl.deterministic": False},
    )
    summary = train(config, str(tmp_path), progress=False)
    assert set(summary["async"]["staleness_histogram"]) <= {0, 1}
    assert all(0 <= r["async/staleness"] <= 1 for r in rows_by_step(tmp_path).values())


def _wait_for_a_newer_version_once_per_batch(monkeypatch, wait_s=5.0):
    """Makes the generator slower than the learner at one point of each batch: at its second
    weight check it waits (up to `wait_s`) for a version newer than the one it started with, as
    a long rollout would, so that in-flight switches happen whatever the machine's speed."""
    import jaxrl_llm.roles.rollout as rollout_role

    real = rollout_role.generate_inflight

    def patient(generator, prompts, *, weights, **kwargs):
        calls = []

        def source():
            version, params = weights()
            calls.append(version)
            deadline = time.monotonic() + wait_s
            while len(calls) == 2 and version == calls[0] and time.monotonic() < deadline:
                time.sleep(0.01)
                version, params = weights()
            return version, params

        return real(generator, prompts, weights=source, **kwargs)

    monkeypatch.setattr(rollout_role, "generate_inflight", patient)


@pytest.mark.slow  # default coverage: rollout/test_inflight.py::test_a_switch_keeps_the_cache_and_tags_every_token, test_staleness_follows_the_schedule_and_never_exceeds_the_bound
def test_inflight_updates_tag_every_token_and_respect_the_bound(tmp_path, text_reward, monkeypatch):
    _wait_for_a_newer_version_once_per_batch(monkeypatch)
    config = _config(
        steps=5,
        **{
            "async_rl.enabled": True,
            "async_rl.max_staleness": 1,
            "async_rl.deterministic": False,
            "async_rl.inflight_updates": True,
            "async_rl.inflight_chunk_tokens": 2,
            "off_policy.correction": "decoupled_ppo",
        },
    )
    summary = train(config, str(tmp_path), progress=False)
    rows = rows_by_step(tmp_path)
    assert sorted(rows) == [1, 2, 3, 4, 5]
    for row in rows.values():
        # A token is never staler than the sample it belongs to, nor beyond the bound.
        assert 0 <= row["async/token_staleness"] <= row["async/staleness"] <= 1
        assert row["async/versions_in_batch"] >= 1
    switched = [r for r in rows.values() if r["async/versions_in_batch"] > 1]
    assert switched, "no batch took newer weights in flight"
    for row in switched:
        assert 0 < row["async/updated_token_fraction"] < 1
        assert row["async/token_staleness"] < row["async/staleness"]
    assert summary["async"]["inflight_updates"] is True
    assert 0 <= summary["async"]["mean_token_staleness"] < 1


def test_inflight_updates_need_the_free_running_mode():
    with pytest.raises(ValueError, match="async_rl.deterministic=False"):
        _config(**{"async_rl.enabled": True, "async_rl.inflight_updates": True})


def _main(workdir, k):
    flags = ("--config.train.num_steps=6", f"--config.async_rl.max_staleness={k}")
    return start_main(ASYNC_TINY, workdir, *flags)


@pytest.mark.slow  # default coverage: faults/test_faults.py::test_empty_step_directory_is_moved_aside[grpo_async]
# resumes grpo_async_tiny.py from a checkpoint
@pytest.mark.parametrize("k", [1, 2, 4])
def test_sigkill_and_resume_reproduce_a_stale_run_exactly(tmp_path, k):
    reference = _main(tmp_path / "a", k)
    out, _ = reference.communicate(timeout=600)
    assert reference.returncode == 0, out
    # killed after step 4: checkpoint 3 holds the versions batches 4.. are generated with
    # (at k = 2: versions 1 and 2 for batches 3 and 4)
    kill_at_step_then_resume(lambda: _main(tmp_path / "b", k), tmp_path / "b", step=4)
    assert_same_steps(tmp_path / "b", tmp_path / "a", steps=6)
    with open(tmp_path / "b" / "summary.json") as f:
        histogram = json.load(f)["async"]["staleness_histogram"]
    assert sum(histogram.values()) == 6 * 8
    assert max(int(s) for s in histogram) == k


def _failing_generator(fail_at, action):
    original = OnlineRun.generate

    def generate(self, step, params, **kwargs):
        if step == fail_at:
            action()
        return original(self, step, params, **kwargs)

    return generate


def _raise():
    raise ConnectionError("sandbox unreachable")


def test_a_generator_that_raises_stops_the_run_and_keeps_the_last_step(tmp_path, monkeypatch):
    monkeypatch.setattr(OnlineRun, "generate", _failing_generator(3, _raise))
    config = _config(
        steps=5,
        **{"async_rl.enabled": True, "async_rl.max_staleness": 0, "train.checkpoint_every": 100},
    )
    start = time.time()
    with pytest.raises(PipelineError, match=r"generator failed \(ConnectionError: sandbox"):
        train(config, str(tmp_path), progress=False)
    assert time.time() - start < 300
    assert os.listdir(tmp_path / "checkpoints") == ["3"]  # steps 1-3 trained, then saved
    assert max(rows_by_step(tmp_path)) == 3


@pytest.mark.slow  # default coverage: test_a_generator_that_raises_stops_the_run_and_keeps_the_last_step
def test_a_stalled_generator_stops_the_run_within_the_timeout(tmp_path, monkeypatch, capsys):
    # The timeout must exceed the first learner step's compilation, which the generator waits on.
    monkeypatch.setattr(OnlineRun, "generate", _failing_generator(2, lambda: time.sleep(120)))
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


def test_resuming_with_another_checkpoint_layout_is_refused(tmp_path):
    config = _config(steps=1, **{"async_rl.enabled": True, "async_rl.max_staleness": 2})
    train(config, str(tmp_path), progress=False)
    with config.unlocked():
        config.async_rl.max_staleness = 4
    with pytest.raises(ValueError, match="async_rl 2 older weight versions per checkpoint, not 4"):
        train(config, str(tmp_path), progress=False)
