"""Tests for jaxrl_llm.losses.off_policy: importance weights (TIS, IcePop, sequence) and AIPO."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.losses import aipo, importance_weights


def _tight(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


# Trainer/rollout ratios: row 0 -> 3, 0.5, 1.5; row 1 -> 0.25, 1, and one padded token.
ROLLOUT = jnp.zeros((2, 3))
OLD = jnp.log(jnp.array([[3.0, 0.5, 1.5], [0.25, 1.0, 7.0]]))
MASK = jnp.array([[1, 1, 1], [1, 1, 0]])


def test_token_truncate_hand_worked():
    w, m = importance_weights(OLD, ROLLOUT, MASK, high=2.0)
    _tight(w, [[2.0, 0.5, 1.5], [0.25, 1.0, 0.0]])  # TIS: min(rho, 2); padding -> 0
    _tight(m["ratio_mean"], (3 + 0.5 + 1.5 + 0.25 + 1) / 5)  # 1.25
    _tight(m["weight_mean"], (2 + 0.5 + 1.5 + 0.25 + 1) / 5)  # 1.05
    _tight(m["clipped_frac"], 1 / 5)
    w, m = importance_weights(OLD, ROLLOUT, MASK, low=0.4, high=2.0)
    _tight(w, [[2.0, 0.5, 1.5], [0.4, 1.0, 0.0]])  # 0.25 raised to 0.4
    _tight(m["clipped_frac"], 2 / 5)


def test_token_mask_hand_worked():
    # IcePop: keep rho inside [0.4, 2], zero outside.
    w, m = importance_weights(OLD, ROLLOUT, MASK, mode="mask", low=0.4, high=2.0)
    _tight(w, [[0.0, 0.5, 1.5], [0.0, 1.0, 0.0]])
    _tight(m["weight_mean"], 3.0 / 5)


def test_sequence_level_hand_worked():
    # Row 0: 3 * 0.5 * 1.5 = 2.25 -> truncated to 2; row 1: 0.25 * 1 = 0.25 (padding ignored).
    w, _ = importance_weights(OLD, ROLLOUT, MASK, level="sequence", high=2.0)
    _tight(w, [[2.0, 2.0, 2.0], [0.25, 0.25, 0.0]])
    # Sequence masking: row 0 (2.25 > 2) is dropped whole; row 1 kept, then dropped by low=0.5.
    w, m = importance_weights(OLD, ROLLOUT, MASK, level="sequence", mode="mask", high=2.0)
    _tight(w, [[0.0, 0.0, 0.0], [0.25, 0.25, 0.0]])
    _tight(m["clipped_frac"], 3 / 5)
    w, _ = importance_weights(OLD, ROLLOUT, MASK, level="sequence", mode="mask", low=0.5, high=2.0)
    _tight(w, jnp.zeros((2, 3)))


def test_weights_carry_no_gradient():
    for kw in (dict(), dict(level="sequence", mode="mask", high=3.0)):
        g_old, g_roll = jax.grad(
            lambda o, r, kw=kw: importance_weights(o, r, MASK, **kw)[0].sum(), argnums=(0, 1)
        )(OLD, ROLLOUT)
        _tight(g_old, jnp.zeros((2, 3)))
        _tight(g_roll, jnp.zeros((2, 3)))


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", ["truncate", "mask"])
def test_jit_matches_eager(level, mode):
    fn = functools.partial(importance_weights, level=level, mode=mode, low=0.3, high=2.0)
    jax.tree.map(_tight, jax.jit(fn)(OLD, ROLLOUT, MASK), fn(OLD, ROLLOUT, MASK))


def test_importance_weights_errors():
    with pytest.raises(ValueError, match=r"importance_weights: unknown level='prefix'"):
        jax.jit(lambda o: importance_weights(o, ROLLOUT, MASK, level="prefix"))(OLD)
    with pytest.raises(ValueError, match=r"importance_weights: unknown mode='clip'"):
        importance_weights(OLD, ROLLOUT, MASK, mode="clip")
    with pytest.raises(ValueError, match=r"low=2.0 must be < high=2.0"):
        importance_weights(OLD, ROLLOUT, MASK, low=2.0, high=2.0)
    with pytest.raises(
        AssertionError, match=r"importance_weights: rollout_logp_bt has shape \(2, 2\)"
    ):
        importance_weights(OLD, ROLLOUT[:, :2], MASK)


# AIPO: ratios 1.5, 0.5 against the rollout policy, A = 1, rho = 1.2 -> w = 1.2, 0.5.
AIPO_LOGP = jnp.log(jnp.array([[1.5, 0.5]]))
AIPO_ROLLOUT = jnp.zeros((1, 2))
AIPO_ADV = jnp.array([1.0])
AIPO_MASK = jnp.ones((1, 2))


def test_aipo_hand_worked():
    loss, m = aipo(AIPO_LOGP, AIPO_ROLLOUT, AIPO_ADV, AIPO_MASK, rho=1.2)
    # -(1.2 ln 1.5 + 0.5 ln 0.5) / 2 = -(0.486558 - 0.346574) / 2
    _tight(loss, -(1.2 * math.log(1.5) + 0.5 * math.log(0.5)) / 2)
    _tight(m["clipfrac_high"], 0.5)
    _tight(m["ratio_max"], 1.5)


def test_aipo_gradient_hand_derived():
    # d l / d logp = -min(r, rho) A / 2 tokens = -1.2 / 2, -0.5 / 2 (the weight is data).
    grad = jax.grad(lambda x: aipo(x, AIPO_ROLLOUT, AIPO_ADV, AIPO_MASK, rho=1.2)[0])(AIPO_LOGP)
    _tight(grad, [[-0.6, -0.25]])
    grad_roll = jax.grad(lambda r: aipo(AIPO_LOGP, r, AIPO_ADV, AIPO_MASK, rho=1.2)[0])(
        AIPO_ROLLOUT
    )
    _tight(grad_roll, jnp.zeros((1, 2)))


def test_aipo_jit_matches_eager():
    fn = functools.partial(aipo, rho=1.2)
    args = (AIPO_LOGP, AIPO_ROLLOUT, AIPO_ADV, AIPO_MASK)
    jax.tree.map(_tight, jax.jit(fn)(*args), fn(*args))


def test_aipo_errors():
    with pytest.raises(ValueError, match=r"aipo: rho=0 must be > 0"):
        aipo(AIPO_LOGP, AIPO_ROLLOUT, AIPO_ADV, AIPO_MASK, rho=0)
    with pytest.raises(AssertionError, match=r"aipo: adv_bt has shape \(2,\), expected \[B\]"):
        aipo(AIPO_LOGP, AIPO_ROLLOUT, jnp.ones(2), AIPO_MASK, rho=2.0)
