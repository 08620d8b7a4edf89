"""The online preference algorithms end to end on the tiny model through the online runner:
online DPO and RRHF learn and resume to repeat the uninterrupted run, RRHF with gold references,
online DPO with an off-policy lag. The offline preference stages are in
tests/stages/test_preference_runs.py."""

import os

import pytest

from jaxrl_llm.runners import train
from jaxrl_llm.stages import load_config
from tests.run_helpers import ROOT, assert_same_values, loss_rows_by_step

CONFIGS = os.path.join(ROOT, "experiments", "configs")


def _config(name, **overrides):
    return load_config(os.path.join(CONFIGS, f"{name}_tiny.py"), overrides)


# Slow (default coverage: test_online_dpo_with_an_off_policy_lag_trains_on_older_samples,
# test_rrhf_with_gold_references_runs_through_the_online_runner; resuming the online runner:
# test_grpo_run.py::test_sigkill_and_resume_reproduces_every_later_step).
@pytest.mark.slow
@pytest.mark.parametrize("name", ["online_dpo", "rrhf"])
def test_online_preference_algorithm_learns_and_resumes(tmp_path, text_reward, name):
    flags = {"train.checkpoint_every": 1, "eval.before": False, "eval.after": False}
    summary = train(_config(name, **{"train.num_steps": 2, **flags}), str(tmp_path / "a"))
    assert summary["algorithm"] == name and summary["steps"] == 2
    train(_config(name, **{"train.num_steps": 1, **flags}), str(tmp_path / "b"))
    train(_config(name, **{"train.num_steps": 2, **flags}), str(tmp_path / "b"))
    want, got = loss_rows_by_step(tmp_path / "a"), loss_rows_by_step(tmp_path / "b")
    assert_same_values(got, want, ["train/loss", "train/grad_norm", "reward/mean"])
    assert all(row["train/grad_norm"] > 0 for row in want.values())  # the reward separates
    if name == "online_dpo":
        assert all(0 < row["algo/pairs_kept"] <= 1 for row in want.values())


def test_rrhf_with_gold_references_runs_through_the_online_runner(tmp_path, text_reward):
    config = _config(
        "rrhf",
        **{
            "train.num_steps": 2,
            "loss.reference_template": "The answer is {answer}.",
            "eval.before": False,
            "eval.after": False,
        },
    )
    train(config, str(tmp_path))
    rows = loss_rows_by_step(tmp_path)
    assert sorted(rows) == [1, 2]
    # 2 prompts x (4 samples + 1 reference) rows a step; the odd-length reward scores them
    assert all(row["train/rows"] == 10 for row in rows.values())
    assert all(0 <= row["algo/reference_reward"] <= 1 for row in rows.values())


def test_online_dpo_with_an_off_policy_lag_trains_on_older_samples(tmp_path, text_reward):
    config = _config(
        "online_dpo",
        **{
            "train.num_steps": 3,
            "async_rl.enabled": True,
            "async_rl.max_staleness": 1,
            "eval.before": False,
            "eval.after": False,
        },
    )
    train(config, str(tmp_path))
    rows = loss_rows_by_step(tmp_path)
    # deterministic mode: batch s is generated with version s - 1 (exactly one step old)
    assert [rows[s]["async/staleness"] for s in (2, 3)] == [1.0, 1.0]
