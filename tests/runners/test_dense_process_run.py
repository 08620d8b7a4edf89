"""Dense process rewards end to end: steps located on the rollout's tokens, handed from the
process reward model through the reward role, and PPO on the tiny model with them in its GAE
(experiments/configs/ppo_prm_steps_tiny.py, the multi-line chain_sum_steps task)."""

import importlib.util
import math
import os

import numpy as np
import pytest

from jaxrl_llm import sweeps
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.models import resolve_model_path
from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf
from jaxrl_llm.models.heads import ScalarHeadModel, load_scalar_model, save_scalar_model
from jaxrl_llm.rewards import RewardRunner
from jaxrl_llm.rewards.process import ProcessReward, dense_step_rewards, step_token_columns
from jaxrl_llm.rewards.refinement import refine_rewards, split_steps
from jaxrl_llm.roles.reward import RewardRole
from jaxrl_llm.rollout.chat import completion_texts
from jaxrl_llm.rollout.types import Rollout
from jaxrl_llm.runners import train
from jaxrl_llm.runners.components import load_policy
from jaxrl_llm.stages import load_config, validate_stage
from tests.run_helpers import ROOT

CONFIGS = os.path.join(ROOT, "experiments", "configs")
TINY = os.path.join(CONFIGS, "ppo_prm_steps_tiny.py")
PROMPT = "<|im_start|>user\n1 + 2 + 3 =<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tokenizer():
    return tokenizer_from_gguf(read_gguf(resolve_model_path("smollm2-135m-instruct")))


@pytest.fixture(scope="module")
def prm_path(tmp_path_factory):
    """A random process reward model on the tiny trunk (what the `:prm` stage would write)."""
    policy, _ = load_policy(load_config(TINY))
    path = str(tmp_path_factory.mktemp("prm") / "process_reward_model")
    save_scalar_model(ScalarHeadModel.from_policy(policy, seed=3, head_init="normal"), path)
    return path


def _rollout(tokenizer, completions, eos):
    """A numpy `Rollout` of PROMPT and each completion's tokens (plus EOS where `eos`)."""
    prompt = tokenizer.encode(PROMPT)
    rows = [
        tokenizer.encode(c) + ([tokenizer.eos_token_id] if e else [])
        for c, e in zip(completions, eos, strict=True)
    ]
    width = len(prompt) + max(len(r) for r in rows) + 2
    tokens = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), bool)
    for b, row in enumerate(rows):
        tokens[b, : len(prompt) + len(row)] = prompt + row
        mask[b, len(prompt) : len(prompt) + len(row)] = True
    zeros = np.zeros((len(rows), width), np.float32)
    return Rollout(
        tokens=tokens,
        completion_mask=mask,
        logprobs=zeros,
        raw_logprobs=zeros,
        prompt_lengths=np.full(len(rows), len(prompt), np.int32),
        lengths=np.array([len(r) for r in rows], np.int32),
        finish_reason=np.array([int(e) for e in eos], np.int32),
    )


def test_step_columns_are_the_tokens_each_step_ends_on(tokenizer):
    completions = ["1 + 2 = 3\n3 + 3 = 6\nThe answer is 6.", "one line", "", "x\n\ny"]
    rollout = _rollout(tokenizer, completions, eos=[True, True, True, False])
    texts = completion_texts(tokenizer, rollout)
    assert texts == completions
    spans = [split_steps(t) for t in texts]
    ends = np.full((4, 3), -1, np.int32)
    for b, row in enumerate(spans):
        ends[b, : len(row)] = [end for _, end in row]
    columns = step_token_columns(tokenizer, rollout, ends)
    p = len(tokenizer.encode(PROMPT))
    for b, row in enumerate(spans):
        assert (columns[b, len(row) :] == -1).all()
        for k, (_, end) in enumerate(row):
            i = columns[b, k] - p  # the step's last token: the first whose prefix reaches `end`
            before = tokenizer.decode(rollout.tokens[b, p : p + i], skip_special_tokens=True)
            upto = tokenizer.decode(rollout.tokens[b, p : p + i + 1], skip_special_tokens=True)
            assert len(before) < end <= len(upto) and upto.startswith(texts[b][:end])
    # Row 0: each line's newline token, then the answer's last token, just before the EOS.
    assert [tokenizer.decode([t]) for t in rollout.tokens[0, columns[0]]] == ["\n", "\n", "."]
    assert columns[0, 2] == p + rollout.lengths[0] - 2
    # Row 1, no marker: one step ending on its last text token. Row 2, empty: no step.
    assert columns[1, 0] == p + rollout.lengths[1] - 2 and (columns[2] == -1).all()
    with pytest.raises(ValueError, match="3 rows of steps for 4 completions"):
        step_token_columns(tokenizer, rollout, ends[:3])
    with pytest.raises(
        ValueError, match=r"process_placement='dense' .* set config.rewards.process_model"
    ):
        dense_step_rewards(tokenizer, rollout, None)


def test_the_reward_role_hands_over_the_weighted_refined_steps(tokenizer, prm_path):
    prompts = [PROMPT] * 4
    completions = ["a\nb\nc", "one step", "", "x\ny"]
    prm = ProcessReward(load_scalar_model(prm_path), tokenizer, refinement="clip", eta=0.5)
    scores = prm.score(prompts, completions)
    np.testing.assert_array_equal(
        scores.steps.ends[:, :3], [[2, 4, 5], [8, -1, -1], [-1, -1, -1], [2, 3, -1]]
    )
    for b, probs in enumerate(scores.probabilities):
        k = len(probs)
        mask = np.ones((1, k), bool)
        want = np.asarray(refine_rewards(probs[None], mask, refinement="clip", eta=0.5))[0]
        np.testing.assert_allclose(scores.steps.rewards[b, :k], want, atol=1e-6)
        assert (scores.steps.rewards[b, k:] == 0).all()
        np.testing.assert_allclose(scores.totals[b], want.sum(), atol=1e-6)
    role = RewardRole(
        RewardRunner({"task": lambda p, c, e: 1.0}, timeout_s=None),
        process=prm,
        process_weight=0.5,
    )
    out = role(prompts, completions, [None] * 4)
    np.testing.assert_allclose(out.steps.rewards, 0.5 * scores.steps.rewards, atol=1e-7)
    np.testing.assert_allclose(out.total, 1.0 + out.steps.rewards.sum(1), atol=1e-6)
    np.testing.assert_array_equal(out.per_function["process_steps"], [3, 1, 0, 2])
    # a success-only baseline (`rewards.count_steps`) logs the same counts, reward unchanged
    baseline = RewardRole(RewardRunner({"task": lambda p, c, e: 1.0}, timeout_s=None),
                          step_marker="\n")  # fmt: skip
    counted = baseline(prompts, completions, [None] * 4)
    np.testing.assert_array_equal(counted.per_function["process_steps"], [3, 1, 0, 2])
    np.testing.assert_array_equal(counted.total, [1.0] * 4)
    assert counted.steps is None and "process" not in counted.per_function
    plain = RewardRole(RewardRunner({"task": lambda p, c, e: 1.0}, timeout_s=None))
    assert "process_steps" not in plain(prompts, completions, [None] * 4).per_function
    with pytest.raises(ValueError, match=r"ProcessReward: eta=1.5 is outside"):
        ProcessReward(load_scalar_model(prm_path), tokenizer, refinement="clip", eta=1.5)


def _module(path):
    spec = importlib.util.spec_from_file_location("_config_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["ppo_prm_steps_smollm2.py", "ppo_prm_steps_tiny.py"])
def test_every_stage_of_the_experiment_config_is_valid(name):
    module = _module(os.path.join(CONFIGS, name))
    stages = {s: module.get_config(s) for s in ("sft", "prm", "rm", "rl")}
    for config in stages.values():
        validate_stage(config)
        assert config.task.name == "chain_sum_steps" and "one operation per line" in (
            config.task.instruction_suffix
        )
    assert "{steps}" in stages["sft"].sft.response_template
    assert stages["rm"].stage == "reward_model"  # an outcome reward model on the same task
    assert stages["rl"].algorithm == "ppo" and stages["rl"].rewards.process_placement == "dense"
    assert stages["rl"].rewards.count_steps  # the success-only arm logs steps per completion
    with pytest.raises(ValueError, match="the stage must be one of"):
        module.get_config("ppo")


def test_ppo_with_dense_process_rewards_runs_two_steps(tmp_path, prm_path):
    overrides = {
        "train.num_steps": 2,
        "eval.before": False,
        "eval.after": False,
        "rewards.process_model": prm_path,
        "rewards.process_refinement": "clip",
    }
    summary = train(load_config(TINY, overrides), str(tmp_path), progress=False)
    assert summary["steps"] == 2 and summary["algorithm"] == "ppo"
    rows = [r for r in read_metrics(str(tmp_path)) if "train/rows" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["reward/process_steps"] >= 1.0  # a completion without "\n" is one step
        # every scored step's reward landed on a completion token
        assert row["algo/process_steps_placed"] == pytest.approx(row["reward/process_steps"])
        assert row["reward/process"] <= 0.0  # Clip: every step reward is <= 0
        assert all(math.isfinite(row[k]) for k in ("train/loss", "critic/loss"))


def test_the_refinement_sweep_is_four_arms_against_the_dense_config():
    trials = sweeps.with_seeds(
        sweeps.load_sweep(os.path.join(ROOT, "experiments", "sweeps", "prm_refinement.py")),
        [0, 1, 2],
    )
    configs = sweeps.check_trials(os.path.join(CONFIGS, "ppo_prm_steps_smollm2.py"), trials)
    arms = [
        (c.rewards.process_model != "", c.rewards.process_placement, c.rewards.process_refinement)
        for c in configs[::3]
    ]
    assert arms == [
        (False, "summed", "none"),  # success only
        (True, "dense", "none"),
        (True, "dense", "clip"),
        (True, "dense", "delta"),
    ]
    assert [c.seed for c in configs[:3]] == [0, 1, 2]
