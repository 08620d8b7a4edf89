"""Process-reward refinements (Clip, Delta), step splitting and reward-model ensembles, on
hand-made arrays."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.rewards.ensemble import EnsembleReward, combine_scores
from jaxrl_llm.rewards.refinement import (
    clip_rewards,
    delta_rewards,
    refine_rewards,
    split_steps,
)

REWARDS = jnp.array([[0.9, 0.2, 0.6, 0.8], [0.7, 0.3, 0.0, 0.0]])
MASK = jnp.array([[True, True, True, True], [True, True, False, False]])


def test_clip_is_min_of_reward_minus_eta_and_zero():
    got = clip_rewards(REWARDS, MASK, eta=0.5)
    want = [[0.0, -0.3, 0.0, 0.0], [0.0, -0.2, 0.0, 0.0]]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_delta_is_the_difference_to_the_next_step_and_zero_at_the_last():
    got = delta_rewards(REWARDS, MASK)
    want = [[0.7, -0.4, -0.2, 0.0], [0.4, 0.0, 0.0, 0.0]]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_repeating_a_good_step_cannot_raise_the_refined_return():
    """The hack Clip and Delta stop: appending copies of a high-scoring step raises the plain
    sum of process rewards, but not the clipped or delta'd return."""

    def returns(steps):
        r = jnp.array([steps], jnp.float32)
        m = jnp.ones_like(r, bool)
        return {
            name: float(refine_rewards(r, m, refinement=name, eta=0.5).sum())
            for name in ("none", "clip", "delta")
        }

    honest = returns([0.9, 0.6])
    padded = returns([0.9, 0.6] + [0.95] * 5 + [0.6])
    assert padded["none"] > honest["none"]
    assert padded["clip"] <= honest["clip"]
    np.testing.assert_allclose(padded["delta"], 0.9 - 0.6, atol=1e-6)  # r_1 - r_K: telescoped
    np.testing.assert_allclose(honest["delta"], 0.9 - 0.6, atol=1e-6)


def test_refine_rewards_rejects_an_unknown_refinement():
    with pytest.raises(ValueError, match="refinement='cap'"):
        refine_rewards(REWARDS, MASK, refinement="cap")


def test_split_steps_on_newlines_and_a_marker():
    assert split_steps("a\nb\n\n c") == [(0, 2), (2, 4), (5, 7)]
    assert split_steps("no marker") == [(0, 9)]
    assert split_steps("Step 1: x. Step 2: y.", marker="Step") == [(0, 4), (4, 15), (15, 21)]
    assert split_steps("") == []
    with pytest.raises(ValueError, match="marker"):
        split_steps("x", marker="")


def test_combine_scores_modes():
    scores = np.array([[1.0, 2.0, 0.0], [3.0, 2.0, -4.0]])
    np.testing.assert_allclose(combine_scores(scores, mode="mean"), [2.0, 2.0, -2.0])
    np.testing.assert_allclose(combine_scores(scores, mode="min"), [1.0, 2.0, -4.0])
    np.testing.assert_allclose(
        combine_scores(scores, mode="mean_minus_std", k=0.5), [1.5, 2.0, -3.0]
    )
    with pytest.raises(ValueError, match="mode='max'"):
        combine_scores(scores, mode="max")
    with pytest.raises(ValueError, match=r"\[M >= 1, B\]"):
        combine_scores(np.zeros(3))


def test_ensemble_reward_scores_every_model():
    calls = []

    def model(offset):
        def score(prompts, completions):
            calls.append(offset)
            return np.array([len(c) + offset for c in completions], np.float32)

        return score

    ensemble = EnsembleReward([model(0.0), model(2.0)], mode="min")
    np.testing.assert_allclose(ensemble(["p", "p"], ["ab", "abcd"]), [2.0, 4.0])
    assert calls == [0.0, 2.0]
    with pytest.raises(ValueError, match="at least one"):
        EnsembleReward([])
