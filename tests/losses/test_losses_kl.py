"""Tests for jaxrl_llm.losses.kl: the k1/k2/k3 estimators, straight-through variants, kl_loss."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxrl_llm.losses import kl, kl_loss
from jaxrl_llm.losses.kl import KL_ESTIMATORS

# Token 0: pi = 0.5, pi_ref = 0.25; token 1: pi = 0.25, pi_ref = 0.5.
LOGP_BT = jnp.log(jnp.array([[0.5, 0.25]]))
REF_BT = jnp.log(jnp.array([[0.25, 0.5]]))
LN2 = math.log(2.0)
EXPECTED = {
    # log_r = ref - logp = -ln2, +ln2
    "k1": [LN2, -LN2],  # -log_r
    "k2": [0.5 * LN2**2, 0.5 * LN2**2],  # 0.5 * 0.480453 = 0.2402265
    "k3": [0.5 + LN2 - 1.0, 2.0 - LN2 - 1.0],  # exp(log_r) - log_r - 1 = 0.193147, 0.306853
}
EXPECTED["k1+"] = EXPECTED["k1"]
EXPECTED["k3+"] = EXPECTED["k3"]
EXPECTED_GRAD = {
    "k1": [1.0, 1.0],  # d(logp - ref)/dlogp
    "k2": [LN2, -LN2],  # logp - ref
    "k3": [0.5, -1.0],  # 1 - exp(ref - logp) = 1 - 0.5, 1 - 2
}
EXPECTED_GRAD["k1+"] = EXPECTED_GRAD["k2"]  # straight-through: k2's gradient
EXPECTED_GRAD["k3+"] = EXPECTED_GRAD["k2"]


def _tight(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_hand_worked_values(estimator):
    _tight(kl(LOGP_BT, REF_BT, estimator=estimator), [EXPECTED[estimator]])


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_straight_through_forward_is_bit_exact(estimator):
    plain = kl(LOGP_BT, REF_BT, estimator=estimator)
    straight = kl(LOGP_BT, REF_BT, estimator=estimator + "+")
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(straight))


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_gradient_hand_derived(estimator):
    grad = jax.grad(lambda x: kl(x, REF_BT, estimator=estimator).sum())(LOGP_BT)
    _tight(grad, [EXPECTED_GRAD[estimator]])
    # The reference is a constant of the loss only through its value: k2's gradient in ref is
    # the negative of the one in logp.
    grad_ref = jax.grad(lambda r: kl(LOGP_BT, r, estimator="k2").sum())(REF_BT)
    _tight(grad_ref, [[-LN2, LN2]])


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_gradient_finite_differences(estimator):
    # The "+" variants have k2's gradient on purpose, so only the plain estimators are checked.
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        logp = jnp.asarray(-rng.random((2, 3)))
        ref = jnp.asarray(-rng.random((2, 3)))
        f = lambda x: kl(x, ref, estimator=estimator)  # noqa: E731
        check_grads(f, (logp,), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def test_k3_clamps():
    # ref - logp = 30 -> clamped to 20 -> exp(20) - 21 is huge -> k3 capped at 10, gradient 0.
    # ref - logp = -30 -> clamped to -20 -> exp(-20) + 19 = 19.0000... -> capped at 10.
    logp = jnp.array([[0.0, 0.0]])
    ref = jnp.array([[30.0, -30.0]])
    _tight(kl(logp, ref, estimator="k3"), [[10.0, 10.0]])
    grad = jax.grad(lambda x: kl(x, ref, estimator="k3").sum())(logp)
    _tight(grad, [[0.0, 0.0]])


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_jit_matches_eager(estimator):
    fn = functools.partial(kl, estimator=estimator)
    _tight(jax.jit(fn)(LOGP_BT, REF_BT), fn(LOGP_BT, REF_BT))


def test_kl_loss_hand_worked():
    # Second row is padding except its first token: k3 values 0.193147, 0.306853 | 0.193147.
    logp = jnp.concatenate([LOGP_BT, LOGP_BT])
    ref = jnp.concatenate([REF_BT, REF_BT])
    mask = jnp.array([[1, 1], [1, 0]])
    k3_0, k3_1 = EXPECTED["k3"]
    loss, metrics = kl_loss(logp, ref, mask)  # token-mean over 3 tokens
    _tight(loss, (2 * k3_0 + k3_1) / 3)
    _tight(metrics["kl"], loss)
    loss_seq, _ = kl_loss(logp, ref, mask, agg="seq-mean-token-mean")
    _tight(loss_seq, ((k3_0 + k3_1) / 2 + k3_0) / 2)
    grad = jax.grad(lambda x: kl_loss(x, ref, mask)[0])(logp)
    _tight(grad, [[0.5 / 3, -1.0 / 3], [0.5 / 3, 0.0]])  # k3 gradients / 3 tokens
    jitted = jax.jit(lambda x: kl_loss(x, ref, mask)[0])(logp)
    _tight(jitted, loss)


def test_unknown_estimator_raises_at_trace_time():
    with pytest.raises(ValueError, match=r"kl: unknown estimator='k4'"):
        jax.jit(lambda x: kl(x, REF_BT, estimator="k4"))(LOGP_BT)


def test_bad_shapes_raise_at_trace_time():
    with pytest.raises(AssertionError, match=r"kl: ref_logp_bt has shape \(1, 1\)"):
        jax.jit(lambda x: kl(x, REF_BT[:, :1], estimator="k1"))(LOGP_BT)
    with pytest.raises(AssertionError, match=r"kl_loss: mask_bt must be \[B, T\]"):
        kl_loss(LOGP_BT, REF_BT, jnp.ones(2))
