"""SFT -> reward model -> PPO from one config on the tiny model: each stage feeds the next, and a
rerun resumes at the stage that did not finish."""

import os

import pytest

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.stages import load_config, run_stage
from tests.run_helpers import ROOT

PIPELINE_TINY = os.path.join(ROOT, "experiments", "configs", "pipeline_tiny.py")


@pytest.mark.slow  # three stages end to end; each stage has its own default-run test
def test_the_pipeline_chains_its_stages_and_resumes_at_the_unfinished_one(tmp_path, text_reward):
    config = load_config(PIPELINE_TINY)
    summaries = run_stage(config, str(tmp_path), progress=False)
    assert set(summaries) == {"sft", "reward_model", "rl"}
    rl_config = (tmp_path / "rl" / "config.json").read_text()
    assert str(tmp_path / "sft" / "model") in rl_config  # the policy is the SFT stage's
    assert str(tmp_path / "reward_model" / "reward_model") in rl_config  # the reward its RM
    rows = [r for r in read_metrics(str(tmp_path / "rl")) if "train/rows" in r]
    assert len(rows) == 2 and all("reward/model" in r for r in rows)

    sft_model = tmp_path / "sft" / "model" / "config.json"
    written = sft_model.stat().st_mtime_ns
    os.remove(tmp_path / "rl" / "summary.json")  # as if the RL stage had been interrupted
    again = run_stage(load_config(PIPELINE_TINY), str(tmp_path), progress=False)
    assert sft_model.stat().st_mtime_ns == written  # SFT and RM were skipped
    assert again["rl"]["steps"] == 2


def test_a_bad_stage_field_is_named_with_its_stage():
    config = load_config(PIPELINE_TINY)
    with config.unlocked():
        config.reward_model.rm.batch_size = 0
    from jaxrl_llm.stages import validate_stage

    with pytest.raises(ValueError, match=r"config\.reward_model: config\.rm\.batch_size=0"):
        validate_stage(config)
