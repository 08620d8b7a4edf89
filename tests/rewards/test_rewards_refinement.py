"""Process-reward refinements (Clip, Delta), step splitting and reward-model ensembles, on
hand-made arrays, and the step-marker record a process reward model keeps."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.advantages import discounted_returns
from jaxrl_llm.losses import step_token_rewards
from jaxrl_llm.rewards.ensemble import EnsembleReward, combine_scores
from jaxrl_llm.rewards.process import check_eta, check_step_marker, write_step_marker
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


def _dense_returns(step_rewards, success, tokens_per_step=2):
    """Undiscounted returns G_t [B, T] of completions whose step k ends on column
    tokens_per_step * (k + 1) - 1, with the success reward on one last token after the steps
    (dense placement, `losses.step_token_rewards`)."""
    step_rewards = jnp.asarray(step_rewards, jnp.float32)
    b, k = step_rewards.shape
    width = tokens_per_step * k + 1
    columns = jnp.broadcast_to(tokens_per_step * (jnp.arange(k) + 1) - 1, (b, k))
    mask = jnp.ones((b, width))
    rewards = step_token_rewards(jnp.asarray(success, jnp.float32), step_rewards, columns, mask)
    return np.asarray(discounted_returns(rewards, mask, gamma=1.0))


def test_clip_dense_return_hand_worked():
    # p = 0.9, 0.2, 0.6, eta 0.5 -> clipped 0, -0.3, 0 on columns 1, 3, 5; success 1 on column 6.
    clipped = clip_rewards(jnp.array([[0.9, 0.2, 0.6]]), jnp.ones((1, 3), bool), eta=0.5)
    np.testing.assert_allclose(
        _dense_returns(clipped, [1.0]), [[0.7, 0.7, 0.7, 0.7, 1.0, 1.0, 1.0]], atol=1e-6
    )


@pytest.mark.parametrize("num_steps", [1, 2, 5, 20, 64])
@pytest.mark.parametrize("eta", [0.1, 0.5, 1.0])
def test_clip_bounds_the_return_by_the_success_reward_whatever_the_number_of_steps(num_steps, eta):
    """Gao et al.'s point: under Clip no trajectory, however many steps it takes, returns more
    than its success reward (from any token on); unrefined, good steps add up past it."""
    rng = np.random.default_rng(num_steps)
    probs = np.concatenate(
        [
            rng.uniform(0.0, 1.0, (3, num_steps)),
            np.ones((1, num_steps)),  # every step perfect: clipped to exactly 0 each
            np.full((1, num_steps), 0.95),  # one good step repeated
        ]
    ).astype(np.float32)
    success = np.array([1.0, 0.0, 1.0, 1.0, 1.0], np.float32)
    mask = jnp.ones(probs.shape, bool)
    clipped = _dense_returns(clip_rewards(jnp.asarray(probs), mask, eta=eta), success)
    assert (clipped <= success[:, None] + 1e-6).all()
    np.testing.assert_allclose(clipped[3], 1.0, atol=1e-6)  # the bound is reached, not passed
    plain = _dense_returns(refine_rewards(jnp.asarray(probs), mask, refinement="none"), success)
    np.testing.assert_allclose(plain[:, 0], success + probs.sum(1), rtol=1e-5)
    assert plain[4, 0] > success[4] + 0.9 * num_steps  # the hack: repeats pay without Clip


def test_delta_dense_returns_telescope_hand_worked():
    # p = 0.9, 0.2, 0.6, 0.8 -> delta 0.7, -0.4, -0.2, 0 on columns 1, 3, 5, 7; success 1 on 8.
    # The return from the first token of step t is success + p_t - p_K (p_K = 0.8).
    deltas = delta_rewards(jnp.array([[0.9, 0.2, 0.6, 0.8]]), jnp.ones((1, 4), bool))
    returns = _dense_returns(deltas, [1.0])
    np.testing.assert_allclose(returns[0, [0, 2, 4, 6, 8]], [1.1, 0.4, 0.8, 1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(returns[0, [0, 2, 4, 6]], 1.0 + np.array([0.9, 0.2, 0.6, 0.8]) - 0.8)


@pytest.mark.parametrize("num_steps", [1, 2, 7, 40])
def test_delta_telescopes_to_first_minus_last_whatever_the_number_of_steps(num_steps):
    """Delta (Gao et al. 2024, 2410.15115: r_k - r_{k+1}, and nothing at the last step,
    whose outcome the success reward judges): the steps sum to p_1 - p_K, so the return lies in
    success + [-1, 1] however many steps a completion repeats."""
    rng = np.random.default_rng(num_steps)
    probs = rng.uniform(0.0, 1.0, (4, num_steps)).astype(np.float32)
    deltas = delta_rewards(jnp.asarray(probs), jnp.ones(probs.shape, bool))
    np.testing.assert_allclose(deltas.sum(1), probs[:, 0] - probs[:, -1], atol=1e-5)
    returns = _dense_returns(deltas, np.ones(4, np.float32))
    np.testing.assert_allclose(returns[:, 0], 1.0 + probs[:, 0] - probs[:, -1], atol=1e-5)
    assert (np.abs(returns - 1.0) <= 1.0 + 1e-6).all()


@pytest.mark.parametrize("first_low", [1, 2, 3])
def test_a_drop_in_the_scores_from_one_step_on_charges_those_steps_only_without_delta(first_low):
    """The pull behind the sign avoidance of issue 46 (docs/process_rewards.md): the PRM scores
    every step after a negative partial result lower (mean label 0.164 against 0.614), i.e. the
    same completion's scores drop by c from step j on. Unrefined and under Clip the return from
    every token up to the last low step falls, so going negative is charged; under Delta the
    return from step j on is unchanged (p_t - p_K: both dropped by c) and the steps before j
    gain c (p_K lower), so the choice itself costs nothing."""
    high = np.array([[0.70, 0.65, 0.75, 0.62]], np.float32)
    drop = 0.45
    low = high.copy()
    low[0, first_low:] -= drop
    mask = jnp.ones(high.shape, bool)
    steps = np.arange(high.shape[1])
    step_start_columns = 2 * steps  # `_dense_returns`: step k ends on column 2k + 1

    def returns(probs, refinement):
        refined = refine_rewards(jnp.asarray(probs), mask, refinement=refinement, eta=0.5)
        return _dense_returns(refined, [1.0])[0, step_start_columns]

    delta_change = returns(low, "delta") - returns(high, "delta")
    np.testing.assert_allclose(delta_change, np.where(steps < first_low, drop, 0.0), atol=1e-6)
    plain_change = returns(low, "none") - returns(high, "none")
    low_steps_from_t = high.shape[1] - np.maximum(steps, first_low)
    np.testing.assert_allclose(plain_change, -drop * low_steps_from_t, atol=1e-6)
    clip_change = returns(low, "clip") - returns(high, "clip")
    # Every high step is >= eta (clipped to 0), every low one under it (charged eta - p).
    charged = np.minimum(low[0] - 0.5, 0.0)
    want_clip = np.array([charged[max(t, first_low) :].sum() for t in steps])
    np.testing.assert_allclose(clip_change, want_clip, atol=1e-6)
    assert (clip_change < 0).all()


def test_eta_outside_the_process_rewards_range_names_the_field():
    for eta in (0.5, 1.0, 1e-3):
        check_eta(eta)
    for eta in (0.0, -0.2, 1.5):
        with pytest.raises(
            ValueError, match=rf"config.rewards.process_eta={eta} is outside .*\(0, 1\]"
        ):
            check_eta(eta, field="config.rewards.process_eta")


def test_a_step_marker_other_than_the_process_models_names_the_field(tmp_path):
    check_step_marker(str(tmp_path), "\n\n")  # a model without a record is not checked
    write_step_marker(str(tmp_path), "\n")
    check_step_marker(str(tmp_path), "\n")
    with pytest.raises(
        ValueError,
        match=r"config.rewards.step_marker='\\n\\n' splits steps on another separator .* "
        r"\('\\n', its step_marker.json\): set config.rewards.step_marker='\\n'",
    ):
        check_step_marker(str(tmp_path), "\n\n", field="config.rewards.step_marker")
    (tmp_path / "step_marker.json").write_text('{"separator": "\\n"}')
    with pytest.raises(ValueError, match=r"step_marker.json is not a step-marker record"):
        check_step_marker(str(tmp_path), "\n")


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
