"""The process reward-model stage on the tiny model (Monte Carlo step labels, per-step training)
and the process reward in the RL stage (Clip / Delta refinements, steps per completion logged)."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.models import resolve_model_path
from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf
from jaxrl_llm.models.heads import ScalarHeadModel, load_scalar_model, save_scalar_model
from jaxrl_llm.rewards.process import ProcessReward, step_token_ends
from jaxrl_llm.rewards.refinement import refine_rewards
from jaxrl_llm.runners import train
from jaxrl_llm.runners.components import load_policy
from jaxrl_llm.stages import load_config, run_stage
from jaxrl_llm.stages.data import split_by_group
from jaxrl_llm.stages.process_reward_model import read_step_labels
from tests.run_helpers import ROOT

PRM_TINY = os.path.join(ROOT, "experiments", "configs", "prm_tiny.py")
GRPO_TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")


@pytest.fixture(scope="module")
def tokenizer():
    return tokenizer_from_gguf(read_gguf(resolve_model_path("smollm2-135m-instruct")))


def test_step_token_ends_point_at_each_steps_last_token(tokenizer):
    prompt = "<|im_start|>user\n2 + 3 * 4?<|im_end|>\n<|im_start|>assistant\n"
    completion = "3 * 4 = 12\n2 + 12 = 14\nThe answer is 14."
    ids, ends = step_token_ends(tokenizer, prompt, completion)
    assert ids == tokenizer.encode(prompt + completion)
    texts = [tokenizer.decode(ids[: e + 1]) for e in ends]
    assert texts == [
        prompt + "3 * 4 = 12\n",
        prompt + "3 * 4 = 12\n2 + 12 = 14\n",
        prompt + completion,
    ]


def test_the_stage_labels_steps_by_monte_carlo_and_trains(tmp_path, text_reward):
    summary = run_stage(load_config(PRM_TINY), str(tmp_path), progress=False)
    items = read_step_labels(str(tmp_path / "steps.jsonl"))
    assert summary["labels"]["completions"] == len(items) > 0
    assert summary["labels"]["steps"] == sum(len(i.labels) for i in items)
    for item in items:  # the last step's label is the completion's own (odd-length) score
        assert item.labels[-1] == float(len(item.completion) % 2)
        assert all(0.0 <= x <= 1.0 for x in item.labels)
    after = summary["after"]
    assert 0.0 <= after["eval/step_accuracy"] <= 1.0
    # the constant predictor: the training steps' majority label, scored on the held-out steps
    config = load_config(PRM_TINY)
    assert summary["labels"]["dropped"] == 0
    held, train_ = split_by_group([i.prompt for i in items], config.prm.eval_fraction, config.seed)
    majority = np.mean([x >= 0.5 for i in train_ for x in items[i].labels]) >= 0.5
    held_right = [(x >= 0.5) == majority for i in held for x in items[i].labels]
    assert after["eval/constant_step_accuracy"] == pytest.approx(np.mean(held_right))
    assert after["eval/margin_over_constant"] == pytest.approx(
        after["eval/step_accuracy"] - after["eval/constant_step_accuracy"]
    )
    low, high = after["eval/margin_over_constant_low"], after["eval/margin_over_constant_high"]
    assert low <= after["eval/margin_over_constant"] <= high
    assert load_scalar_model(summary["process_reward_model"]).trunk.config.num_layers == 2
    # the step separator the model learned is kept beside it; the RL stage must split on it
    with open(os.path.join(summary["process_reward_model"], "step_marker.json")) as f:
        assert json.load(f) == {"marker": config.prm.marker}
    rl = {"rewards.process_model": summary["process_reward_model"]}
    assert load_config(GRPO_TINY, rl).rewards.step_marker == config.prm.marker
    with pytest.raises(ValueError, match=r"config.rewards.step_marker='; ' splits steps on"):
        load_config(GRPO_TINY, {**rl, "rewards.step_marker": "; "})


def test_a_bad_step_label_file_names_the_line(tmp_path):
    path = tmp_path / "steps.jsonl"
    good = {"prompt": "p", "completion": "a\nb", "labels": [1.0, 0.5]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "labels": [1.0]}) + "\n")
    with pytest.raises(
        ValueError, match=r"steps\.jsonl:2: field 'labels' has 1 labels for 2 steps"
    ):
        read_step_labels(str(path))
    path.write_text(json.dumps({**good, "labels": [1.0, 2.0]}) + "\n")
    with pytest.raises(
        ValueError, match=r"steps\.jsonl:1: field 'labels' must hold numbers in \[0, 1\]"
    ):
        read_step_labels(str(path))


def _tiny_prm(tmp_path):
    policy, tokenizer = load_policy(load_config(GRPO_TINY))
    path = str(tmp_path / "prm")
    save_scalar_model(ScalarHeadModel.from_policy(policy, seed=3, head_init="normal"), path)
    return path, tokenizer


def test_process_reward_sums_the_refined_step_probabilities(tmp_path):
    path, tokenizer = _tiny_prm(tmp_path)
    prompts = ["<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"] * 3
    completions = ["a\nb\nc", "one step", "x\ny"]
    plain = ProcessReward(load_scalar_model(path), tokenizer, refinement="none")
    totals = plain(prompts, completions)
    np.testing.assert_array_equal(plain.last_steps, [3, 1, 2])
    probabilities = plain.last_step_probabilities
    np.testing.assert_allclose(totals, [p.sum() for p in probabilities], rtol=1e-5)
    for refinement in ("clip", "delta"):
        prm = ProcessReward(load_scalar_model(path), tokenizer, refinement=refinement, eta=0.5)
        got = prm(prompts, completions)
        for b, p in enumerate(probabilities):
            mask = jnp.ones((1, len(p)), bool)
            want = refine_rewards(jnp.asarray(p)[None], mask, refinement=refinement, eta=0.5)
            np.testing.assert_allclose(got[b], float(want.sum()), rtol=1e-5, atol=1e-6)


def test_rl_with_a_process_reward_logs_it_and_the_steps(tmp_path):
    path, _ = _tiny_prm(tmp_path)
    overrides = {
        "train.num_steps": 1,
        "eval.before": False,
        "eval.after": False,
        "rewards.process_model": path,
        "rewards.process_refinement": "delta",
    }
    train(load_config(GRPO_TINY, overrides), str(tmp_path / "rl"), progress=False)
    (row,) = [r for r in read_metrics(str(tmp_path / "rl")) if "train/rows" in r]
    assert row["reward/process_steps"] >= 1.0
    assert np.isfinite(row["reward/process"])
    with pytest.raises(ValueError, match="config.rewards.process_refinement='cap'"):
        load_config(GRPO_TINY, {**overrides, "rewards.process_refinement": "cap"})
