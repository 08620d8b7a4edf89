"""The SFT stage end to end on the tiny model: it learns, resumes exactly, writes a policy the next
stage loads, and names bad config fields."""

import json
import os

import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.models import from_pretrained
from jaxrl_llm.stages import load_config, run_stage, validate_stage
from tests.run_helpers import ROOT

SFT_TINY = os.path.join(ROOT, "experiments", "configs", "sft_tiny.py")


def _losses(workdir):
    rows = [r for r in read_metrics(str(workdir)) if "train/loss" in r]
    assert len({r["step"] for r in rows}) == len(rows), "a step logged twice"
    return {r["step"]: r["train/loss"] for r in rows}


def test_sft_lowers_held_out_loss_and_writes_a_loadable_policy(tmp_path):
    config = load_config(SFT_TINY, {"train.num_steps": 8})
    summary = run_stage(config, str(tmp_path), progress=False)
    assert summary["after"]["eval/loss"] < summary["before"]["eval/loss"]
    assert 0.0 <= summary["before"]["eval/accuracy"] <= 1.0  # held-out greedy accuracy
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["steps"] == 8
    model, tokenizer = from_pretrained(summary["model"])
    assert tokenizer.vocab_size == model.config.vocab_size
    trained = nnx.state(model, nnx.Param)
    assert all(np.isfinite(np.asarray(x)).all() for x in __import__("jax").tree.leaves(trained))


def test_sft_resumes_where_it_stopped(tmp_path):
    run_stage(
        load_config(SFT_TINY, {"train.num_steps": 6}), str(tmp_path / "whole"), progress=False
    )
    run_stage(load_config(SFT_TINY, {"train.num_steps": 3}), str(tmp_path / "cut"), progress=False)
    killed_row = '{"step": 4, "train/loss": 99.0}\n'  # logged after checkpoint 3, then killed
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as f:
        f.write(killed_row)
    summary = run_stage(
        load_config(SFT_TINY, {"train.num_steps": 6}), str(tmp_path / "cut"), progress=False
    )
    whole, cut = _losses(tmp_path / "whole"), _losses(tmp_path / "cut")
    assert sorted(cut) == sorted(whole) == [1, 2, 3, 4, 5, 6]
    for step in whole:
        np.testing.assert_allclose(cut[step], whole[step], rtol=1e-5, err_msg=str(step))
    assert summary["steps"] == 6
    assert open(tmp_path / "cut" / "metrics.jsonl.superseded").read() == killed_row


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"sft.data": "/nonexistent/records.jsonl"}, "config.sft.data"),
        ({"sft.data": "somewhere"}, "config.sft.data"),
        ({"sft.batch_size": 0}, "config.sft.batch_size"),
        ({"sft.response_template": "no answer"}, "config.sft.response_template"),
    ],
)
def test_a_bad_sft_config_names_the_field(overrides, field):
    config = load_config(SFT_TINY)
    with config.unlocked():
        for key, value in overrides.items():
            section, name = key.split(".")
            config[section][name] = value
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        validate_stage(config)
