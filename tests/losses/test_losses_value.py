"""Tests for jaxrl_llm.losses.value_loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxrl_llm.losses import value_loss

# Three valid tokens and one padded token (junk values), clip = 0.2:
#   t0: v = 1, old = 0.5, R = 2 -> (v - R)^2 = 1; v_clip = 0.5 + 0.2 = 0.7 -> (0.7 - 2)^2 = 1.69
#   t1: v = 2, old = 2.5, R = 1 -> 1;           v_clip = 2.5 - 0.2 = 2.3 -> (2.3 - 1)^2 = 1.69
#   t2: v = 0, old = 0,   R = 1 -> 1;           v_clip = 0               -> 1 (not clipped)
# loss = 0.5 * (1.69 + 1.69 + 1) / 3 = 0.73
V = jnp.array([[1.0, 2.0, 0.0, 50.0]])
OLD = jnp.array([[0.5, 2.5, 0.0, -50.0]])
RET = jnp.array([[2.0, 1.0, 1.0, 3.0]])
MASK = jnp.array([[1, 1, 1, 0]])


def _tight(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_hand_worked():
    loss, m = value_loss(V, OLD, RET, MASK, clip=0.2)
    _tight(loss, 0.73)
    _tight(m["clipfrac"], 2 / 3)
    _tight(m["values_mean"], 1.0)
    _tight(m["returns_mean"], 4 / 3)
    # residuals R - v = 1, -1, 1: variance 8/9; Var(R) = 2/9 -> 1 - 4 = -3
    _tight(m["explained_variance"], -3.0)
    loss, m = value_loss(V, OLD, RET, MASK, clip=None)
    _tight(loss, 0.5)  # 0.5 * (1 + 1 + 1) / 3
    _tight(m["clipfrac"], 0.0)


def test_gradient_hand_derived():
    # Clipped tokens t0, t1 sit outside the trust region: zero gradient. t2: (v - R) / 3 = -1/3.
    grad = jax.grad(lambda v: value_loss(v, OLD, RET, MASK, clip=0.2)[0])(V)
    _tight(grad, [[0.0, 0.0, -1 / 3, 0.0]])
    grad = jax.grad(lambda v: value_loss(v, OLD, RET, MASK, clip=None)[0])(V)
    _tight(grad, [[-1 / 3, 1 / 3, -1 / 3, 0.0]])  # 0.5 * 2 (v - R) / 3
    grad_old = jax.grad(lambda o: value_loss(V, o, RET, MASK, clip=0.2)[0])(OLD)
    _tight(grad_old, jnp.zeros_like(OLD))


def test_gradient_finite_differences():
    with jax.enable_x64(True):
        v = jnp.asarray(V, jnp.float64)
        f = lambda v: value_loss(v, OLD, RET, MASK, clip=0.2, agg="seq-mean-token-sum")[0]  # noqa: E731
        check_grads(f, (v,), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)
        v = jnp.asarray(OLD + 0.05, jnp.float64)  # inside the trust region
        check_grads(f, (v,), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def test_jit_matches_eager():
    fn = lambda v, o, r, m: value_loss(v, o, r, m, clip=0.2)  # noqa: E731
    jax.tree.map(_tight, jax.jit(fn)(V, OLD, RET, MASK), fn(V, OLD, RET, MASK))


def test_errors():
    with pytest.raises(AssertionError, match=r"value_loss: returns_bt has shape \(1, 3\)"):
        jax.jit(lambda v: value_loss(v, OLD, RET[:, :3], MASK, clip=0.2))(V)
    with pytest.raises(ValueError, match=r"value_loss: clip=-1 must be >= 0"):
        value_loss(V, OLD, RET, MASK, clip=-1)
