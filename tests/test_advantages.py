"""Tests for jaxrl_llm.advantages: GRPO, RLOO, ReMax, REINFORCE++, GAE, whitening."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm import advantages as adv


def _tight(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def _no_gradient(fn, *args):
    """Advantages are data: their gradient with respect to every input is zero."""
    grads = jax.grad(
        lambda *a: jnp.sum(jax.tree.leaves(fn(*a))[0] ** 2), argnums=tuple(range(len(args)))
    )(*args)
    for g in grads:
        _tight(g, jnp.zeros_like(g))


def _jit_matches_eager(fn, *args):
    jax.tree.map(_tight, jax.jit(fn)(*args), fn(*args))


# ---------------------------------------------------------------------------- GRPO
REWARDS_BG = jnp.array([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 2.0, 3.0]])


def test_grpo_hand_worked():
    # Row 0: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.5773503 -> +-0.5 / (0.5773503 + 1e-6)
    # Row 1: all equal -> 0.  Row 2: mean 1.5, std sqrt(5 / 3) = 1.2909944 -> (r - 1.5) / std
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    s = math.sqrt(5 / 3) + 1e-6
    expected = [[a, -a, -a, a], [0, 0, 0, 0], [-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s]]
    _tight(adv.grpo(REWARDS_BG), expected)
    # Dr. GRPO: centring only.
    _tight(
        adv.grpo(REWARDS_BG, normalize_std=False),
        [[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0], [-1.5, -0.5, 0.5, 1.5]],
    )


def test_grpo_group_of_one_is_the_raw_reward():
    _tight(adv.grpo(jnp.array([[3.0], [-1.0]])), [[3.0], [-1.0]])  # verl: mean 0, std 1


def test_grpo_gradient_jit_and_errors():
    _no_gradient(adv.grpo, REWARDS_BG)
    _jit_matches_eager(functools.partial(adv.grpo, normalize_std=True), REWARDS_BG)
    _jit_matches_eager(functools.partial(adv.grpo, normalize_std=False), REWARDS_BG)
    with pytest.raises(AssertionError, match=r"grpo: rewards_bg must be \[B, G\]"):
        jax.jit(adv.grpo)(REWARDS_BG[0])


# ---------------------------------------------------------------------------- RLOO
def test_rloo_hand_worked():
    # 1 - (2 + 6) / 2 = -3; 2 - (1 + 6) / 2 = -1.5; 6 - (1 + 2) / 2 = 4.5
    _tight(adv.rloo(jnp.array([[1.0, 2.0, 6.0]])), [[-3.0, -1.5, 4.5]])
    # Equivalent form G / (G - 1) (r - mean) on a random batch.
    r = jnp.asarray(np.random.default_rng(0).normal(size=(3, 5)), jnp.float32)
    _tight(adv.rloo(r), 5 / 4 * (r - r.mean(-1, keepdims=True)))
    _tight(adv.rloo(jnp.array([[3.0]])), [[3.0]])  # group of one: raw reward (verl)


def test_rloo_gradient_jit_and_errors():
    _no_gradient(adv.rloo, REWARDS_BG)
    _jit_matches_eager(adv.rloo, REWARDS_BG)
    with pytest.raises(AssertionError, match=r"rloo: rewards_bg must be \[B, G\]"):
        adv.rloo(jnp.zeros((2, 2, 2)))


# ---------------------------------------------------------------------------- ReMax
def test_remax():
    r, base = jnp.array([1.0, 0.5]), jnp.array([0.5, 1.0])
    _tight(adv.remax(r, base), [0.5, -0.5])  # 1 - 0.5, 0.5 - 1
    _no_gradient(adv.remax, r, base)
    _jit_matches_eager(adv.remax, r, base)
    with pytest.raises(AssertionError, match=r"remax: baseline_rewards_b has shape \(3,\)"):
        adv.remax(r, jnp.zeros(3))


# ---------------------------------------------------------------------------- whiten
def test_whiten_hand_worked():
    x = jnp.array([[0.0, 2.0, 4.0, 100.0]])
    mask = jnp.array([[1, 1, 1, 0]])
    # mean 2, unbiased var (4 + 0 + 4) / 2 = 4 -> (x - 2) / sqrt(4 + 1e-8); padding -> 0
    _tight(adv.whiten(x, mask), [[-1.0, 0.0, 1.0, 0.0]])
    _tight(adv.whiten(x, mask, shift_mean=False), [[1.0, 2.0, 3.0, 0.0]])  # (x - 2) / 2 + 2
    _tight(adv.whiten(jnp.array([5.0, 1.0]), jnp.array([1, 0])), [0.0, 0.0])  # one entry


def test_whiten_gradient_jit_and_errors():
    x = jnp.array([[0.0, 2.0, 4.0, 100.0]])
    mask = jnp.array([[1, 1, 1, 0]])
    _no_gradient(lambda x: adv.whiten(x, mask), x)
    _jit_matches_eager(adv.whiten, x, mask)
    with pytest.raises(
        AssertionError, match=r"whiten: mask has shape \(1, 3\) but x has shape \(1, 4\)"
    ):
        adv.whiten(x, mask[:, :3])


# ---------------------------------------------------------------------------- returns, REINFORCE++
def test_discounted_returns_hand_worked():
    # gamma 0.5: G_2 = 2; G_1 = 0 + 0.5 * 2 = 1; G_0 = 1 + 0.5 * 1 = 1.5; padding -> 0
    r = jnp.array([[1.0, 0.0, 2.0, 5.0]])
    _tight(adv.discounted_returns(r, jnp.array([[1, 1, 1, 0]]), gamma=0.5), [[1.5, 1.0, 2.0, 0.0]])
    # A masked hole is skipped: G_2 = 2, G_0 = 1 + 0.5 * 2 = 2 (the 7 is ignored).
    r = jnp.array([[1.0, 7.0, 2.0]])
    _tight(adv.discounted_returns(r, jnp.array([[1, 0, 1]]), gamma=0.5), [[2.0, 0.0, 2.0]])


def test_reinforce_pp_hand_worked():
    # gamma 1: returns [[1, 1], [-1, -1]]; mean 0, unbiased var 4 / 3 -> +-1 / sqrt(4/3) = +-0.8660254
    r = jnp.array([[0.0, 1.0, 0.0], [0.0, -1.0, 3.0]])
    mask = jnp.array([[1, 1, 0], [1, 1, 0]])
    a = 1 / math.sqrt(4 / 3 + 1e-8)
    _tight(adv.reinforce_pp(r, mask), [[a, a, 0.0], [-a, -a, 0.0]])


def test_reinforce_pp_gradient_jit_and_errors():
    r = jnp.array([[0.0, 1.0, 0.5], [0.2, -1.0, 3.0]])
    mask = jnp.array([[1, 1, 0], [1, 1, 1]])
    _no_gradient(lambda r: adv.reinforce_pp(r, mask, gamma=0.9), r)
    _no_gradient(lambda r: adv.discounted_returns(r, mask, gamma=0.9), r)
    _jit_matches_eager(functools.partial(adv.reinforce_pp, gamma=0.9), r, mask)
    _jit_matches_eager(functools.partial(adv.discounted_returns, gamma=0.9), r, mask)
    with pytest.raises(AssertionError, match=r"reinforce_pp: mask_bt has shape \(2, 2\)"):
        adv.reinforce_pp(r, mask[:, :2])


# ---------------------------------------------------------------------------- GAE
def _gae_loop(rewards, values, mask, gamma, lam):
    """Reference: verl's masked loop, one token at a time, in float64 NumPy."""
    rewards, values, mask = (np.asarray(x, np.float64) for x in (rewards, values, mask))
    adv_out = np.zeros_like(rewards)
    next_value = np.zeros(rewards.shape[0])
    last = np.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        candidate = delta + gamma * lam * last
        next_value = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_value
        last = candidate * mask[:, t] + (1 - mask[:, t]) * last
        adv_out[:, t] = last * mask[:, t]
    return adv_out, (adv_out + values) * mask


def test_gae_hand_worked():
    # gamma 0.9, lam 0.8, rewards (0, 0, 1), values (0.5, 0.6, 0.7):
    #   t2: delta = 1 - 0.7 = 0.3                       A = 0.3
    #   t1: delta = 0.9 * 0.7 - 0.6 = 0.03              A = 0.03 + 0.72 * 0.3 = 0.246
    #   t0: delta = 0.9 * 0.6 - 0.5 = 0.04              A = 0.04 + 0.72 * 0.246 = 0.21712
    # returns = A + V = 0.71712, 0.846, 1.0
    r = jnp.array([[0.0, 0.0, 1.0]])
    v = jnp.array([[0.5, 0.6, 0.7]])
    a, ret = adv.gae(r, v, jnp.ones((1, 3)), gamma=0.9, lam=0.8)
    _tight(a, [[0.21712, 0.246, 0.3]])
    _tight(ret, [[0.71712, 0.846, 1.0]])
    # The same sequence with a skipped (masked) token inside and padding after.
    r = jnp.array([[0.0, 9.0, 0.0, 1.0, 4.0]])
    v = jnp.array([[0.5, 9.0, 0.6, 0.7, 4.0]])
    a, ret = adv.gae(r, v, jnp.array([[1, 0, 1, 1, 0]]), gamma=0.9, lam=0.8)
    _tight(a, [[0.21712, 0.0, 0.246, 0.3, 0.0]])
    _tight(ret, [[0.71712, 0.0, 0.846, 1.0, 0.0]])


def test_gae_decoupled_critic_lambda_hand_worked():
    # VC-PPO's decoupled lambdas: the same sequence as test_gae_hand_worked (gamma 0.9), the
    # advantages with lam 0.8 as there, the returns with critic_lam 1:
    #   t2: A' = 0.3;   t1: A' = 0.03 + 0.9 * 0.3 = 0.3;   t0: A' = 0.04 + 0.9 * 0.3 = 0.31
    # returns = A' + V = 0.81, 0.9, 1.0: the discounted reward-to-go 0.9^2, 0.9, 1.
    r = jnp.array([[0.0, 9.0, 0.0, 1.0, 4.0]])
    v = jnp.array([[0.5, 9.0, 0.6, 0.7, 4.0]])
    mask = jnp.array([[1, 0, 1, 1, 0]])
    a, ret = adv.gae(r, v, mask, gamma=0.9, lam=0.8, critic_lam=1.0)
    _tight(a, [[0.21712, 0.0, 0.246, 0.3, 0.0]])
    _tight(ret, [[0.81, 0.0, 0.9, 1.0, 0.0]])
    # critic_lam 0: one-step TD targets r + gamma V' = 0.54, 0.63, 1.0
    _, ret = adv.gae(r, v, mask, gamma=0.9, lam=0.8, critic_lam=0.0)
    _tight(ret, [[0.54, 0.0, 0.63, 1.0, 0.0]])
    coupled = adv.gae(r, v, mask, gamma=0.9, lam=0.8)
    jax.tree.map(_tight, adv.gae(r, v, mask, gamma=0.9, lam=0.8, critic_lam=0.8), coupled)
    jax.tree.map(_tight, adv.gae(r, v, mask, gamma=0.9, lam=0.8, critic_lam=None), coupled)


def test_gae_lambda_one_is_monte_carlo():
    # gamma = lam = 1: A_t = (sum of rewards from t) - V_t.
    rng = np.random.default_rng(0)
    r = jnp.asarray(rng.normal(size=(2, 6)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(2, 6)), jnp.float32)
    a, ret = adv.gae(r, v, jnp.ones((2, 6)), gamma=1.0, lam=1.0)
    mc = jnp.cumsum(r[:, ::-1], axis=-1)[:, ::-1]
    _tight(ret, mc)
    _tight(a, mc - v)


def test_whitened_gae_with_a_fresh_critic_pushes_down_correct_early_tokens_unless_lambda_one():
    # The value-initialisation bias of VC-PPO (2503.01491) that experiments/configs/
    # ppo_prm_steps_smollm2.py avoids with lambda 1: 7 of 10 completions right (score 1 on
    # the last of 40 tokens), critic values 0. At lambda 0.95 the first token of a correct
    # completion gets 0.95^39 = 0.135 before whitening, below the token mean (0.7 * 0.436 =
    # 0.305), so it is pushed down; at lambda 1 every token of it gets 1 - 0.7 > 0.
    length, right = 40, 7
    scores = np.array([1.0] * right + [0.0] * (10 - right), np.float32)
    rewards = np.zeros((10, length), np.float32)
    rewards[:, -1] = scores
    mask, values = np.ones_like(rewards), np.zeros_like(rewards)
    raw, _ = adv.gae(rewards, values, mask, gamma=1.0, lam=0.95)
    np.testing.assert_allclose(raw[0, 0], 0.95**39, rtol=1e-5)
    biased = np.asarray(adv.whiten(raw, mask))
    first_pushed_up = int(np.argmax(biased[0] > 0))
    assert (biased[0, :first_pushed_up] < 0).all() and first_pushed_up == 16
    monte_carlo = np.asarray(
        adv.whiten(adv.gae(rewards, values, mask, gamma=1.0, lam=1.0)[0], mask)
    )
    assert (monte_carlo[:right] > 0).all() and (monte_carlo[right:] < 0).all()


def test_gae_matches_reference_loop():
    rng = np.random.default_rng(1)
    r = rng.normal(size=(4, 7)).astype(np.float32)
    v = rng.normal(size=(4, 7)).astype(np.float32)
    mask = (rng.random((4, 7)) < 0.7).astype(np.int32)
    a, ret = adv.gae(r, v, mask, gamma=0.95, lam=0.9)
    a_ref, ret_ref = _gae_loop(r, v, mask, 0.95, 0.9)
    _tight(a, a_ref)
    _tight(ret, ret_ref)


def test_gae_gradient_jit_and_errors():
    r = jnp.array([[0.0, 0.3, 1.0]])
    v = jnp.array([[0.5, 0.6, 0.7]])
    mask = jnp.array([[1, 1, 0]])
    _no_gradient(lambda r, v: adv.gae(r, v, mask, gamma=0.9, lam=0.8), r, v)
    _jit_matches_eager(functools.partial(adv.gae, gamma=0.9, lam=0.8), r, v, mask)
    with pytest.raises(AssertionError, match=r"gae: values_bt has shape \(1, 2\)"):
        jax.jit(functools.partial(adv.gae, gamma=0.9, lam=0.8))(r, v[:, :2], mask)


def test_public_names_have_docstrings():
    assert adv.__all__, "advantages must declare __all__"
    for name in adv.__all__:
        doc = getattr(adv, name).__doc__ or ""
        assert "Args:" in doc and "See " in doc, (
            f"advantages.{name} needs a docstring with a citation"
        )
