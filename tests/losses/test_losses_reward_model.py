"""Reward-model losses on hand-made arrays: Bradley-Terry (with margin) and step cross-entropy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.losses.reward_model import bradley_terry, step_cross_entropy


def _log_sigmoid(x):
    return -np.log1p(np.exp(-x))


def test_bradley_terry_matches_the_formula():
    chosen, rejected = jnp.array([2.0, 0.0, 1.0]), jnp.array([0.0, 1.0, 1.0])
    loss, m = bradley_terry(chosen, rejected)
    want = -np.mean(_log_sigmoid(np.array([2.0, -1.0, 0.0])))
    np.testing.assert_allclose(loss, want, rtol=1e-6)
    assert float(m["accuracy"]) == pytest.approx((1 + 0 + 0.5) / 3)  # a tie counts a half
    assert float(m["margin"]) == pytest.approx(1 / 3)


def test_a_margin_shifts_the_difference_and_raises_the_loss():
    chosen, rejected = jnp.array([2.0, 1.0]), jnp.array([0.0, 0.5])
    margin = jnp.array([1.0, 0.0])
    loss, m = bradley_terry(chosen, rejected, margin_b=margin)
    want = -np.mean(_log_sigmoid(np.array([2.0 - 1.0, 0.5])))
    np.testing.assert_allclose(loss, want, rtol=1e-6)
    assert float(loss) > float(bradley_terry(chosen, rejected)[0])
    assert float(m["accuracy"]) == 1.0  # accuracy ignores the margin


def test_bradley_terry_gradient_pushes_the_scores_apart():
    grad = jax.grad(lambda c, r: bradley_terry(c, r)[0], argnums=(0, 1))
    g_c, g_r = grad(jnp.array([0.0]), jnp.array([0.0]))
    np.testing.assert_allclose(g_c, [-0.5])  # d/dc -log sigmoid(c - r) = -sigmoid(r - c)
    np.testing.assert_allclose(g_r, [0.5])


def test_bradley_terry_checks_shapes():
    with pytest.raises(AssertionError, match="bradley_terry: rejected_b"):
        bradley_terry(jnp.zeros(3), jnp.zeros(2))


def test_step_cross_entropy_on_soft_labels_and_padding():
    logits = jnp.array([[0.0, 2.0, 9.0], [-1.0, 0.0, 0.0]])
    targets = jnp.array([[0.5, 1.0, 0.0], [0.0, 0.0, 0.0]])
    mask = jnp.array([[True, True, False], [True, False, False]])
    loss, m = step_cross_entropy(logits, targets, mask)

    def bce(z, y):
        return -(y * _log_sigmoid(z) + (1 - y) * _log_sigmoid(-z))

    want = (bce(0.0, 0.5) + bce(2.0, 1.0) + bce(-1.0, 0.0)) / 3  # the padded 9.0 is ignored
    np.testing.assert_allclose(loss, want, rtol=1e-6)
    assert float(m["steps"]) == 3
    # 0.0 vs 0.5 (logit 0 is not > 0, target 0.5 >= 0.5: wrong), 2 vs 1 right, -1 vs 0 right
    assert float(m["accuracy"]) == pytest.approx(2 / 3)


def test_step_cross_entropy_of_no_steps_is_zero():
    loss, m = step_cross_entropy(jnp.ones((2, 2)), jnp.ones((2, 2)), jnp.zeros((2, 2), bool))
    assert float(loss) == 0.0 and float(m["steps"]) == 0
