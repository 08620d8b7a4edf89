"""The GRPO loop end to end on a tiny random model: resume after SIGKILL, non-finite guard, CLI."""

import json
import os

import numpy as np
import pytest

from jaxrl_llm.algorithms import grpo
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import NonFiniteLossError, is_process_dependent, train
from jaxrl_llm.runners.hooks import WALL_TIME_KEY
from jaxrl_llm.stages import load_config
from tests.run_helpers import assert_same_steps, kill_at_step_then_resume, start_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")
STEPS = 5
FLAGS = [
    f"--config.train.num_steps={STEPS}",
    "--config.train.checkpoint_every=2",
    "--config.eval.before=False",
    "--config.eval.after=False",
]


def _main(workdir, *extra):
    return start_main(TINY, workdir, *FLAGS, *extra)


def test_sigkill_and_resume_reproduces_every_later_step(tmp_path):
    reference = _main(tmp_path / "a")
    out, _ = reference.communicate(timeout=600)
    assert reference.returncode == 0, out
    # checkpoint 2 is on disk before step 3 starts
    kill_at_step_then_resume(lambda: _main(tmp_path / "b"), tmp_path / "b", step=3)
    assert_same_steps(tmp_path / "b", tmp_path / "a", STEPS, rtol=1e-6)
    # the checkpoints carry the wall time across the kill (the killed process's to its step-2 save)
    wall_at = {step: _saved_meta(tmp_path / "b", step)[WALL_TIME_KEY] for step in (2, STEPS)}
    with open(tmp_path / "b" / "summary.json") as f:
        summary = json.load(f)
    assert "wall_time_since_step" not in summary
    assert summary["wall_time_s"] >= wall_at[STEPS] > wall_at[2] > 0


def _saved_meta(workdir, step):
    with open(workdir / "checkpoints" / str(step) / "metadata" / "metadata") as f:
        return json.load(f)


def test_unknown_config_key_lists_close_matches(tmp_path):
    proc = _main(tmp_path, "--config.rollout.max_new_token=4")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert (
        "error: --config.rollout.max_new_token is not a config field; "
        "did you mean --config.rollout.max_new_tokens?" in out
    )


def test_nonfinite_steps_are_skipped_then_stop_the_run(tmp_path, monkeypatch):
    config = load_config(
        TINY,
        {
            "train.num_steps": 6,
            "train.checkpoint_every": 1,
            "eval.before": False,
            "eval.after": False,
            "train.max_consecutive_nonfinite": 2,
        },
    )
    real = grpo.group_advantages
    calls = []

    def poisoned(rewards, group, **kw):
        calls.append(1)
        adv = real(rewards, group, **kw)
        return adv if len(calls) <= 2 else np.full_like(adv, np.nan)

    monkeypatch.setattr(grpo, "group_advantages", poisoned)
    with pytest.raises(NonFiniteLossError, match="2 consecutive steps"):
        train(config, str(tmp_path), progress=False)
    rows = read_metrics(str(tmp_path))
    assert [r["train/nonfinite"] for r in rows] == [0.0, 0.0, 1.0, 1.0]
    steps = sorted(int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit())
    assert steps[-1] == 2  # the last good checkpoint is kept; nothing was saved after it


@pytest.mark.slow  # default coverage: algorithms/test_grpo.py::test_packed_batch_gives_the_unpacked_loss_and_gradient
def test_packed_run_matches_unpacked_first_step(tmp_path):
    overrides = {
        "train.num_steps": 1,
        "train.num_minibatches": 1,
        "train.pack_row_multiple": 1,
        "rollout.min_prompt_bucket": 64,
        "train.pack_width": 144,  # two tiny-task sequences fit in a packed row
        "loss.kl_beta": 0.1,  # the reference forward runs on the packed rows too
        "eval.before": False,
        "eval.after": False,
    }
    rows = {}
    for pack in (False, True):
        config = load_config(TINY, dict(overrides, **{"train.pack_sequences": pack}))
        workdir = tmp_path / str(pack)
        train(config, str(workdir), progress=False)
        rows[pack] = read_metrics(str(workdir))[0]
    sequences = 2 * 4
    assert rows[False]["train/rows"] == sequences
    assert rows[True]["train/rows"] < sequences
    assert rows[True]["reward/mean"] == rows[False]["reward/mean"]  # same rollout
    for key in ("train/pg_loss", "train/entropy", "train/kl_ref", "train/grad_norm"):
        np.testing.assert_allclose(rows[True][key], rows[False][key], rtol=1e-4, atol=1e-6)


def test_packing_needs_token_mean_aggregation():
    with pytest.raises(ValueError, match="config.train.pack_sequences=True needs"):
        load_config(TINY, {"train.pack_sequences": True, "loss.agg": "seq-mean-token-mean"})


def test_pack_width_narrower_than_a_rollout_row_is_named():
    with pytest.raises(ValueError, match="config.train.pack_width=16"):
        load_config(TINY, {"train.pack_sequences": True, "train.pack_width": 16})


@pytest.mark.slow  # default coverage: test_sigkill_and_resume_reproduces_every_later_step (equal to the uninterrupted run, step by step)
def test_two_identical_runs_differ_only_in_timings(tmp_path):
    """Every metric outside "time/" (training, rewards, evaluation before and after, work
    counters) is the same in two runs of one config and seed; timings live under "time/"."""
    overrides = {"train.num_steps": 2, "eval.before": True, "eval.after": True}
    runs = []
    for name in ("a", "b"):
        train(load_config(TINY, overrides), str(tmp_path / name), progress=False)
        runs.append(read_metrics(str(tmp_path / name)))
    assert len(runs[0]) == len(runs[1]) >= 4  # eval before, 2 steps, eval after
    assert any("time/eval_s" in row for row in runs[0])
    assert not any(k.startswith("eval/") and "second" in k for row in runs[0] for k in row)
    for first, second in zip(*runs, strict=True):
        keep = lambda row: {k: v for k, v in row.items() if not is_process_dependent(k)}
        assert keep(first) == keep(second)
