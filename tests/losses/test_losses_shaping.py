"""Tests for jaxrl_llm.losses.shaping: overlong penalty, last-token rewards, dense step rewards,
KL in reward, adaptive KL controller."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.losses import (
    AdaptiveKLState,
    adaptive_kl_init,
    adaptive_kl_update,
    kl_in_reward,
    last_token_rewards,
    overlong_penalty,
    step_token_rewards,
)


def _tight(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------- overlong penalty
def test_overlong_penalty_hand_worked():
    # max_len 20, cache 4 -> no penalty up to 16, then (16 - L) / 4, floor -1 beyond 20.
    lengths = jnp.array([10, 16, 18, 20, 25])
    _tight(overlong_penalty(lengths, max_len=20, cache_len=4), [0.0, 0.0, -0.5, -1.0, -1.0])
    _tight(
        overlong_penalty(lengths, max_len=20, cache_len=4, factor=2.0), [0.0, 0.0, -1.0, -2.0, -2.0]
    )


def test_overlong_penalty_gradient_and_jit():
    # On the ramp the slope is -factor / cache_len = -0.25; flat elsewhere.
    lengths = jnp.array([10.0, 17.0, 25.0])
    fn = functools.partial(overlong_penalty, max_len=20, cache_len=4)
    _tight(jax.grad(lambda x: fn(x).sum())(lengths), [0.0, -0.25, 0.0])
    _tight(jax.jit(fn)(lengths), fn(lengths))


def test_overlong_penalty_errors():
    with pytest.raises(ValueError, match=r"need 0 < cache_len=0 <= max_len=20"):
        overlong_penalty(jnp.array([1]), max_len=20, cache_len=0)
    with pytest.raises(AssertionError, match=r"overlong_penalty: lengths_b must be \[B\]"):
        overlong_penalty(jnp.ones((2, 2)), max_len=20, cache_len=4)


# ---------------------------------------------------------------------------- last-token rewards
SCORES = jnp.array([1.0, 2.0, 3.0])
MASK = jnp.array([[1, 1, 0], [1, 0, 1], [0, 0, 0]])  # last valid tokens: 1, 2, none


def test_last_token_rewards_hand_worked():
    _tight(last_token_rewards(SCORES, MASK), [[0.0, 1.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0]])


def test_last_token_rewards_gradient_and_jit():
    c = jnp.arange(9.0).reshape(3, 3)  # d sum(c * r) / d score_b = c at b's last valid token
    grad = jax.grad(lambda s: (c * last_token_rewards(s, MASK)).sum())(SCORES)
    _tight(grad, [1.0, 5.0, 0.0])
    _tight(jax.jit(last_token_rewards)(SCORES, MASK), last_token_rewards(SCORES, MASK))
    with pytest.raises(
        AssertionError, match=r"last_token_rewards: scores_b has shape \(2,\), expected \[B\]"
    ):
        last_token_rewards(SCORES[:2], MASK)


# ---------------------------------------------------------------------------- dense step rewards
def test_step_token_rewards_hand_worked():
    # Row 0: completion at columns 1-4, steps end at 2 and 4 (the last token, with the outcome).
    # Row 1: completion at 1-3, one step at 1, one padding step (-1), one on a masked column (4).
    # Row 2: no completion token: nothing at all.
    outcome = jnp.array([1.0, 0.5, 2.0])
    steps = jnp.array([[-0.3, -0.2, 0.0], [0.25, 9.0, 7.0], [1.0, 0.0, 0.0]])
    columns = jnp.array([[2, 4, -1], [1, -1, 4], [0, -1, -1]])
    mask = jnp.array([[0, 1, 1, 1, 1], [0, 1, 1, 1, 0], [0, 0, 0, 0, 0]])
    got = step_token_rewards(outcome, steps, columns, mask)
    _tight(
        got,
        [
            [0.0, 0.0, -0.3, 0.0, 1.0 - 0.2],
            [0.0, 0.25, 0.0, 0.5, 0.0],
            [0.0, 0.0, 0.0, 0.0, 0.0],
        ],
    )
    # The undiscounted return is the summed form's total (outcome + steps) where all land.
    _tight(got.sum(-1)[0], 1.0 - 0.3 - 0.2)
    _tight(jax.jit(step_token_rewards)(outcome, steps, columns, mask), got)


def test_step_token_rewards_without_steps_is_last_token_rewards():
    none = jnp.full((3, 2), -1)
    _tight(
        step_token_rewards(SCORES, jnp.zeros((3, 2)), none, MASK), last_token_rewards(SCORES, MASK)
    )


def test_step_token_rewards_shape_errors():
    with pytest.raises(AssertionError, match=r"step_token_rewards: step_columns_bs has shape"):
        step_token_rewards(SCORES, jnp.zeros((3, 2)), jnp.zeros((3, 1), int), MASK)
    with pytest.raises(AssertionError, match=r"step_token_rewards: step_rewards_bs has 2 rows"):
        step_token_rewards(SCORES, jnp.zeros((2, 2)), jnp.zeros((2, 2), int), MASK)


# ---------------------------------------------------------------------------- KL in reward
def test_kl_in_reward_hand_worked():
    rewards = last_token_rewards(SCORES, MASK)
    logp = jnp.array([[-1.0, -1.0, 0.0], [-1.0, 0.0, -2.0], [0.0, 0.0, 0.0]])
    ref = jnp.array([[-1.5, -0.5, 0.0], [-1.0, 5.0, -1.0], [0.0, 0.0, 0.0]])
    # k1 = logp - ref: row 0: 0.5, -0.5; row 1: 0, (masked), -1.
    shaped, m = kl_in_reward(rewards, logp, ref, MASK, beta=0.1)
    _tight(shaped, [[-0.05, 1.0 + 0.05, 0.0], [0.0, 0.0, 2.0 + 0.1], [0.0, 0.0, 0.0]])
    # verl's current_kl: per-sequence token means 0 and -0.5, averaged over the 2 sequences.
    _tight(m["kl"], -0.25)
    _tight(m["kl_sum"], (0.0 - 1.0) / 2)
    _tight(m["kl_penalty"], -0.025)
    # k3 variant on row 0, token 0: log_r = -0.5 -> e^-0.5 + 0.5 - 1 = 0.1065307
    shaped3, _ = kl_in_reward(rewards, logp, ref, MASK, beta=1.0, estimator="k3")
    _tight(shaped3[0, 0], -(math.exp(-0.5) - 0.5))
    # Shaped rewards are data: no gradient flows to the log-probs.
    grad = jax.grad(lambda x: kl_in_reward(rewards, x, ref, MASK, beta=0.1)[0].sum())(logp)
    _tight(grad, jnp.zeros((3, 3)))
    fn = functools.partial(kl_in_reward, beta=0.1)
    jax.tree.map(_tight, jax.jit(fn)(rewards, logp, ref, MASK), fn(rewards, logp, ref, MASK))
    with pytest.raises(AssertionError, match=r"kl_in_reward: ref_logp_bt has shape \(3, 2\)"):
        kl_in_reward(rewards, logp, ref[:, :2], MASK, beta=0.1)
    with pytest.raises(ValueError, match=r"kl: unknown estimator='k5'"):
        kl_in_reward(rewards, logp, ref, MASK, beta=0.1, estimator="k5")


# ---------------------------------------------------------------------------- adaptive KL
def test_adaptive_kl_hand_worked():
    state = adaptive_kl_init(0.1)
    assert isinstance(state, AdaptiveKLState)
    # KL 0.5 vs target 6: error 0.5/6 - 1 = -0.917, clipped to -0.2 -> 0.1 * (1 - 0.2 * 256/10000)
    low = adaptive_kl_update(state, 0.5, 256, target=6.0, horizon=10000)
    _tight(low.coef, 0.1 * (1 - 0.2 * 0.0256))  # 0.0994880
    # KL 6.6: error 0.1 (inside the clip) -> 0.1 * (1 + 0.1 * 0.0256) = 0.100256
    high = adaptive_kl_update(state, 6.6, 256, target=6.0, horizon=10000)
    _tight(high.coef, 0.1 * (1 + 0.1 * 0.0256))


def test_adaptive_kl_gradient_and_jit():
    state = adaptive_kl_init(0.1)
    fn = functools.partial(adaptive_kl_update, target=6.0, horizon=10000)
    # Inside the clip, d coef' / d kl = coef * n / (horizon * target) = 0.1 * 0.0256 / 6
    grad = jax.grad(lambda kl: fn(state, kl, 256).coef)(6.6)
    _tight(grad, 0.1 * 0.0256 / 6.0)
    _tight(jax.jit(fn)(state, 6.6, 256).coef, fn(state, 6.6, 256).coef)
    _tight(jax.jit(adaptive_kl_init)(0.1).coef, state.coef)
    # Several updates under lax.scan: the state is a pytree.
    coefs = jax.lax.scan(lambda s, kl: (fn(s, kl, 256), s.coef), state, jnp.full(3, 0.5))[1]
    _tight(coefs, [0.1, 0.1 * 0.99488, 0.1 * 0.99488**2])


def test_adaptive_kl_errors():
    with pytest.raises(ValueError, match=r"adaptive_kl_update: target=0 must be > 0"):
        adaptive_kl_update(adaptive_kl_init(0.1), 1.0, 1, target=0, horizon=10)
    with pytest.raises(ValueError, match=r"adaptive_kl_update: horizon=0 must be > 0"):
        adaptive_kl_update(adaptive_kl_init(0.1), 1.0, 1, target=1.0, horizon=0)
    with pytest.raises(ValueError, match=r"adaptive_kl_init: init_coef=-1 must be >= 0"):
        adaptive_kl_init(-1)
