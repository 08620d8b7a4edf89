"""The stabilisers in tiny GRPO runs: dynamic sampling, overlong shaping, adaptive entropy."""

import math
import os

import jax
import numpy as np
import pytest

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import train
from jaxrl_llm.runners.hooks import Hook, default_hooks
from jaxrl_llm.stages import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")
BASE = {
    "train.num_steps": 3,
    "eval.before": False,
    "eval.after": False,
    # a reward with spread on a random model: length in words (the task reward is always 0)
    "rewards.length_weight": 1.0,
    "rewards.length_max_words": 4,
}


def steps(workdir):
    return [row for row in read_metrics(str(workdir)) if "train/rows" in row]


def test_dynamic_sampling_soft_overlong_and_adaptive_entropy(tmp_path, text_reward):
    config = load_config(
        TINY,
        {
            **BASE,
            "stabilise.dynamic_sampling": True,
            "stabilise.max_sampling_rounds": 3,
            "stabilise.overlong": "soft",
            "stabilise.overlong_cache_tokens": 4,
            "stabilise.entropy_target": 1.0,  # below a random model's: the weight falls
            "loss.entropy_coef": 0.001,
        },
    )
    train(config, str(tmp_path), progress=False)
    rows = steps(tmp_path)
    assert len(rows) == 3
    for row in rows:
        assert 1 <= row["stabilise/sampling_rounds"] <= 3
        assert 0.0 <= row["stabilise/kept_group_fraction"] <= 1.0
        # fewer informative groups than needed only after the last round
        if row["stabilise/kept_group_fraction"] < 1.0:
            assert row["stabilise/sampling_rounds"] == 3
        assert -1.0 <= row["stabilise/overlong_penalty"] <= 0.0
        assert row["train/rows"] == config.rollout.num_prompts * config.rollout.group_size
    coefs = [row["stabilise/entropy_coef"] for row in rows]
    assert coefs[0] == 0.001
    for before, after, row in zip(coefs, coefs[1:], rows, strict=False):
        # log c <- log c + rate (target - H), rate 0.5, clipped at 1e-6
        expected = max(before * math.exp(0.5 * (1.0 - row["train/entropy"])), 1e-6)
        assert after == pytest.approx(expected, rel=1e-6) and after < before


def test_overlong_filter_masks_truncated_completions(tmp_path):
    config = load_config(TINY, {**BASE, "stabilise.overlong": "filter"})
    train(config, str(tmp_path), progress=False)
    rows = steps(tmp_path)
    # a random model rarely ends before max_new_tokens: most rows are filtered
    fractions = np.array([row["stabilise/filtered_fraction"] for row in rows])
    eos = np.array([row["completion/eos_fraction"] for row in rows])
    np.testing.assert_allclose(fractions, 1.0 - eos, atol=1e-6)


class _ActorStates(Hook):
    """Keeps the actor's train state (weights and optimizer state) at the start and the end."""

    def on_start(self, run):
        self.first = jax.device_get(run.state_tree()["actor"])

    def on_end(self, run):
        self.last = jax.device_get(run.state_tree()["actor"])


def test_a_step_with_no_loss_token_leaves_the_weights_and_logs_no_token_metric(tmp_path):
    # The task reward alone on a random model: every group ties at 0, dynamic sampling keeps
    # none, so every row's loss is masked.
    config = load_config(
        TINY,
        {**BASE, "rewards.length_weight": 0.0, "stabilise.dynamic_sampling": True},
    )
    actor = _ActorStates()
    run_hooks = default_hooks(config, str(tmp_path), desc="GRPO", progress=False) + [actor]
    train(config, str(tmp_path), progress=False, hooks=run_hooks)
    rows = steps(tmp_path)
    assert len(rows) == 3
    for row in rows:
        assert row["stabilise/kept_group_fraction"] == 0.0
        assert row["train/no_loss_tokens"] == 1.0
        # no loss, entropy or grad norm of an empty batch (they would read 0)
        assert not {"train/loss", "train/entropy", "train/grad_norm"} & row.keys()
    first, last = jax.tree.leaves(actor.first), jax.tree.leaves(actor.last)
    assert len(first) == len(last) > 0
    for before, after in zip(first, last, strict=True):
        np.testing.assert_array_equal(before, after)  # no optimizer step (Adam, weight decay)


def test_clip_cov_run_drops_a_share_of_the_tokens(tmp_path, text_reward):
    config = load_config(TINY, {**BASE, "stabilise.clip_cov_fraction": 0.05})
    # a random model's covariances are small: a window that admits every token
    config.stabilise.clip_cov_low, config.stabilise.clip_cov_high = -100.0, 100.0
    train(config, str(tmp_path), progress=False)
    rows = steps(tmp_path)
    assert len(rows) == 3
    for row in rows:
        assert row["train/clip_cov/eligible_fraction"] == pytest.approx(1.0)
        # floor(0.05 N) of N loss tokens (at least 1): 5% or just under, never none
        assert 0 < row["train/clip_cov/dropped_fraction"] <= 0.05
        assert np.isfinite(row["train/loss"])


def test_adaptive_clip_cov_share_steps_with_the_entropy(tmp_path, text_reward):
    """Clip-Cov's share under `clip_cov_target_ratio`: each step drops at most the share it
    logs, and the next share is the dual-ascent step from the logged entropy."""
    config = load_config(
        TINY,
        {
            **BASE,
            "stabilise.clip_cov_fraction": 0.25,
            "stabilise.clip_cov_target_ratio": 0.5,  # half a random model's: the share falls
            "stabilise.clip_cov_rate": 0.5,
            # a floor at which a step's few dozen tokens still drop a share, not the one token
            # dropped whenever any is eligible
            "stabilise.clip_cov_min_fraction": 0.1,
        },
    )
    config.stabilise.clip_cov_low, config.stabilise.clip_cov_high = -100.0, 100.0
    train(config, str(tmp_path), progress=False)
    rows = steps(tmp_path)
    assert len(rows) == 3 and rows[0]["stabilise/clip_cov_fraction"] == pytest.approx(0.25)
    target = 0.5 * rows[0]["train/entropy"]
    for row, following in zip(rows, rows[1:], strict=False):
        assert row["stabilise/clip_cov_target"] == pytest.approx(target)
        share = row["stabilise/clip_cov_fraction"]
        assert 0 < row["train/clip_cov/dropped_fraction"] <= share + 1e-6
        expected = share * math.exp(0.5 * (target - row["train/entropy"]))
        assert following["stabilise/clip_cov_fraction"] == pytest.approx(
            min(max(expected, 0.1), 0.3), rel=1e-5
        )
    assert rows[-1]["stabilise/clip_cov_fraction"] < 0.25
