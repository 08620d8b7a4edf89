"""The reward-model check: the AUC of a learned reward at ranking the verifier's right samples
above its wrong ones, on hand-made scores; the streak that trips it; its config errors; and a
tiny RL run against a random reward model that flags, or stops after the tripping step with
that step saved and evaluated."""

import json
import os

import numpy as np
import pytest

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.rewards.model_check import ModelCheck, model_verifier_scalars, verifier_auc
from jaxrl_llm.stages import load_config
from tests.run_helpers import ROOT

GRPO_TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")


def test_the_auc_counts_right_over_wrong_pairs_with_ties_as_half():
    # right samples score 0.9 and 0.4; wrong ones 0.5 and 0.1: pairs (0.9 > 0.5), (0.9 > 0.1),
    # (0.4 < 0.5), (0.4 > 0.1) -> 3 of 4
    assert verifier_auc([0.9, 0.5, 0.4, 0.1], [1.0, 0.0, 1.0, 0.0]) == 0.75
    assert verifier_auc([0.2, 0.2], [1.0, 0.0]) == 0.5  # a tie: neither ranks first
    assert verifier_auc([0.1, 0.9, 0.8], [1.0, 0.0, 0.0]) == 0.0  # prefers the wrong ones
    # partial credit is not right, as reward/accuracy counts it
    assert verifier_auc([0.9, 0.1], [0.5, 1.0]) == 0.0
    assert verifier_auc([0.3, 0.7], [1.0, 1.0]) is None  # nothing to rank
    assert verifier_auc([0.3, 0.7], [0.0, 0.0]) is None
    with pytest.raises(ValueError, match="3 scores and 2 verdicts"):
        verifier_auc([0.1, 0.2, 0.3], [1.0, 0.0])


def test_the_auc_equals_the_mann_whitney_statistic_on_random_scores():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=64).round(1)  # rounded: ties occur
    right = rng.random(64) < 0.4
    ranks = _average_ranks(scores)
    n_right, n_wrong = right.sum(), (~right).sum()
    u = ranks[right].sum() - n_right * (n_right + 1) / 2
    assert verifier_auc(scores, right.astype(float)) == pytest.approx(u / (n_right * n_wrong))


def _average_ranks(values):
    """1-based ranks, tied values given their mean rank."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def test_the_step_metric_needs_a_model_and_the_verifier():
    per_function = {"task": np.array([1.0, 0.0]), "model": np.array([0.7, 0.2])}
    assert model_verifier_scalars(per_function) == {"reward/model_verifier_auc": 1.0}
    assert model_verifier_scalars({"task": np.array([1.0, 0.0])}) == {}
    assert model_verifier_scalars({**per_function, "task": np.array([1.0, 1.0])}) == {}


def test_the_check_trips_after_steps_in_a_row_and_starts_again():
    check = ModelCheck(min_auc=0.6, steps=3)
    seen = [check.observe(a) for a in (0.5, 0.5, 0.7, 0.5, None, 0.4, 0.59, 0.1, 0.2, 0.3)]
    # 0.7 ends the first run of two; None neither extends nor ends one; after tripping at the
    # third low step in a row (0.5, 0.4, 0.59) the count starts again (0.1, 0.2, 0.3)
    assert seen == [False, False, False, False, False, False, True, False, False, True]
    assert not ModelCheck(min_auc=0.6, steps=1).observe(0.6)  # at the floor is not under it


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"rewards.model_check_auc": 0.6}, r"config\.rewards\.model is empty"),
        ({"rewards.model_check_auc": 1.5}, r"model_check_auc=1\.5 must be in \[0, 1\]"),
        (
            {"rewards.model": "rm", "rewards.model_check_auc": 0.6, "rewards.model_check_steps": 0},
            r"model_check_steps=0 must be an integer >= 1",
        ),
        (
            {"rewards.model": "rm", "rewards.model_check_auc": 0.6,
             "rewards.model_check_action": "halt"},
            r"model_check_action='halt' must be one of \('flag', 'stop'\)",
        ),
    ],
)  # fmt: skip
def test_bad_check_fields_name_the_field_and_the_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(GRPO_TINY, overrides)


@pytest.fixture
def random_reward_model(tmp_path):
    """A tiny reward model with a random head: it ranks samples at about chance."""
    from jaxrl_llm.models.heads import ScalarHeadModel, save_scalar_model
    from jaxrl_llm.runners.components import load_policy

    policy, _ = load_policy(load_config(GRPO_TINY))
    path = str(tmp_path / "rm")
    save_scalar_model(ScalarHeadModel.from_policy(policy, seed=1, head_init="normal"), path)
    return path


@pytest.fixture
def contrary_reward_model(monkeypatch, text_reward):
    """A "reward model" that prefers exactly what the tests' odd-length verifier calls wrong:
    its AUC is 0 at every step whose samples hold both kinds."""
    from jaxrl_llm.runners import components

    class Contrary:
        def __init__(self, model, tokenizer, **kwargs):
            del model, tokenizer, kwargs

        def __call__(self, prompts, completions):
            return np.array([1.0 - len(c) % 2 for c in completions], np.float32)

    monkeypatch.setattr(components, "load_scalar_model", lambda path: None)
    monkeypatch.setattr(components, "ModelReward", Contrary)
    return "contrary"


def _run(tmp_path, model, action, **more):
    from jaxrl_llm.runners import train

    overrides = {
        "train.num_steps": 4,
        "eval.before": False,
        "rewards.model": model,
        "rewards.task_weight": 0.0,
        # an AUC of 1 is never under 1: any step whose ranking is imperfect counts as low
        "rewards.model_check_auc": 1.0,
        "rewards.model_check_steps": 2,
        "rewards.model_check_action": action,
        **more,
    }
    workdir = tmp_path / action
    summary = train(load_config(GRPO_TINY, overrides), str(workdir), progress=False)
    steps = [r for r in read_metrics(str(workdir)) if "train/rows" in r]
    return summary, steps, workdir


def _trips(steps, min_auc=1.0, streak=2):
    """The steps at which a `ModelCheck` fed the logged AUCs trips (a step whose samples were
    all right or all wrong logs none; which steps those are depends on the sampled text)."""
    check = ModelCheck(min_auc=min_auc, steps=streak)
    return [r["step"] for r in steps if check.observe(r.get("reward/model_verifier_auc"))]


def test_flag_marks_each_streak_and_the_run_goes_on(tmp_path, text_reward, random_reward_model):
    summary, steps, _ = _run(
        tmp_path, random_reward_model, "flag", **{"rewards.model_whiten": True}
    )
    assert [r["step"] for r in steps] == [1, 2, 3, 4] and "ended_early" not in summary
    aucs = [r["reward/model_verifier_auc"] for r in steps if "reward/model_verifier_auc" in r]
    assert aucs and all(0.0 <= a <= 1.0 for a in aucs)  # 8 samples a step: both kinds, mostly
    flagged = [r["step"] for r in steps if r.get("reward/model_check_flagged")]
    assert flagged == _trips(steps)
    assert summary.get("model_check", {"flagged_steps": []})["flagged_steps"] == flagged
    # whitened over each step's samples: the reward model's scores average 0; their mean
    # before whitening is logged beside them (a random head's scores: not all 0)
    assert all(abs(r["reward/model"]) < 1e-5 for r in steps)
    assert any(abs(r["reward/model_raw"]) > 1e-4 for r in steps)


def test_stop_ends_the_run_after_the_tripping_step_saved_and_evaluated(
    tmp_path, contrary_reward_model
):
    summary, steps, workdir = _run(tmp_path, contrary_reward_model, "stop")
    assert all(r.get("reward/model_verifier_auc", 0.0) == 0.0 for r in steps)  # always contrary
    stop = _trips(steps)[0]  # the second step with both kinds of samples (step 2 here)
    assert [r["step"] for r in steps][-1] == stop == summary["steps"] < 4
    assert summary["model_check"] == {"flagged_steps": [stop]}
    assert summary["ended_early"].startswith("config.rewards.model_check_auc: the reward model")
    assert "eval_after" in summary  # the held-out evaluation of the step it stopped at
    assert [r["step"] for r in read_metrics(str(workdir)) if "eval/accuracy" in r] == [stop]
    assert max(int(s) for s in os.listdir(workdir / "checkpoints")) == stop
    assert json.loads((workdir / "summary.json").read_text())["steps"] == stop
    # started again by hand on the same directory, it stays stopped: nothing more is trained
    again, steps_again, _ = _run(tmp_path, contrary_reward_model, "stop")
    assert again["steps"] == stop and again["ended_early"] == summary["ended_early"]
    assert [r["step"] for r in steps_again] == [r["step"] for r in steps]
    assert max(int(s) for s in os.listdir(workdir / "checkpoints")) == stop
    # with the check turned off (a change of the run, so resume_with_changes), it trains on
    on = {"rewards.model_check_auc": 0.0, "train.resume_with_changes": True}
    resumed, steps_on, _ = _run(tmp_path, contrary_reward_model, "stop", **on)
    assert resumed["steps"] == 4 and "ended_early" not in resumed
    assert [r["step"] for r in steps_on][-1] == 4


def test_a_resumed_run_goes_on_counting_the_streak(tmp_path, contrary_reward_model):
    # a run ended after its first step (one low step counted), then resumed to its 4 steps
    _, first, _ = _run(tmp_path, contrary_reward_model, "stop", **{"train.num_steps": 1})
    resumed, steps, _ = _run(tmp_path, contrary_reward_model, "stop")
    assert "reward/model_verifier_auc" in first[0]  # step 1 starts the streak
    assert resumed["steps"] == _trips(steps)[0] < 4  # where an uninterrupted run stops


def test_whitening_puts_each_member_on_one_scale_before_the_ensemble_combines():
    from jaxrl_llm.rewards.ensemble import (
        EnsembleReward,
        WhitenedReward,
        raw_scores,
        whiten_scores,
    )

    np.testing.assert_allclose(whiten_scores([1.0, 3.0, 5.0]), [-1.2247449, 0.0, 1.2247449])
    np.testing.assert_array_equal(whiten_scores([2.0, 2.0]), [0.0, 0.0])  # no spread: zeros
    # two members ranking alike on scales 1000x apart: raw, the min is the small-scale one's
    # scores alone; whitened, both count the same
    small = lambda prompts, completions: np.array([0.001, 0.002, 0.003], np.float32)
    large = lambda prompts, completions: np.array([3.0, 1.0, 2.0], np.float32)
    raw = EnsembleReward([small, large], mode="min")(None, None)
    np.testing.assert_allclose(raw, [0.001, 0.002, 0.003])
    whitened = EnsembleReward([WhitenedReward(small), WhitenedReward(large)], mode="min")
    np.testing.assert_allclose(whitened(None, None), [-1.2247449, -1.2247449, 0.0], rtol=1e-6)
    # the scores before whitening stay readable (reward/model_raw): the members' mean
    np.testing.assert_allclose(raw_scores(whitened), [1.5005, 0.501, 1.0015], rtol=1e-6)
    assert raw_scores(EnsembleReward([small, large])) is None and raw_scores(small) is None
    with pytest.raises(ValueError, match=r"model_whiten=True .* config\.rewards\.model is empty"):
        load_config(GRPO_TINY, {"rewards.model_whiten": True})
