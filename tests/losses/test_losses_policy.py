"""Tests for jaxrl_llm.losses.policy: PPO clip, GSPO, CISPO, REINFORCE, entropy bonus."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxrl_llm.losses import (
    aggregate_count,
    cispo,
    entropy_bonus,
    gspo,
    ppo_clip,
    ratio_metrics,
    reinforce,
)
from jaxrl_llm.losses.aggregation import AGG_MODES


def _tight(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def _jit_matches_eager(fn, *args):
    jax.tree.map(_tight, jax.jit(fn)(*args), fn(*args))


# ---------------------------------------------------------------------------- PPO clip
# Four valid tokens, old log-probs 0, so the ratio is exp(logp):
#   a: r = 1.5, A = +1  -> max(-1.5, -1.2) = -1.2   clipped high (zero gradient)
#   b: r = 0.5, A = -1  -> max( 0.5,  0.8) =  0.8   clipped low  (zero gradient)
#   c: r = 0.5, A = +1  -> max(-0.5, -0.8) = -0.5   unclipped    (gradient -A r = -0.5)
#   d: r = 4.0, A = -1  -> max( 4.0,  1.2) =  4.0   unclipped    (gradient -A r = 4.0)
#                          dual clip c = 3: min(4.0, 3.0) = 3.0  (zero gradient)
# plus one padded token (junk values) and one padded slot.
PPO_LOGP = jnp.log(jnp.array([[1.5, 0.5, 0.5], [4.0, 9.0, 1.0]]))
PPO_OLD = jnp.zeros((2, 3))
PPO_ADV = jnp.array([[1.0, -1.0, 1.0], [-1.0, 5.0, 0.0]])
PPO_MASK = jnp.array([[1, 1, 1], [1, 0, 0]])


def test_ppo_clip_hand_worked():
    loss, m = ppo_clip(PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK)
    _tight(loss, (-1.2 + 0.8 - 0.5 + 4.0) / 4)  # 3.1 / 4 = 0.775
    _tight(m["clipfrac"], 0.5)  # a, b
    _tight(m["clipfrac_high"], 0.25)  # a
    _tight(m["clipfrac_low"], 0.25)  # b
    _tight(m["clipfrac_dual"], 0.0)
    _tight(m["ratio_mean"], (1.5 + 0.5 + 0.5 + 4.0) / 4)  # 1.625
    _tight(m["ratio_min"], 0.5)
    _tight(m["ratio_max"], 4.0)
    # k1 = -log r: -(ln 1.5 + 2 ln 0.5 + ln 4) / 4 = -ln(1.5) / 4
    _tight(m["approx_kl_k1"], -math.log(1.5) / 4)
    # k3 = r - 1 - log r: 0.094535 + 0.193147 + 0.193147 + 1.613706 = 2.094535, / 4
    k3 = [r - 1 - math.log(r) for r in (1.5, 0.5, 0.5, 4.0)]
    _tight(m["approx_kl"], sum(k3) / 4)


def test_ppo_clip_dual_clip_and_clip_higher():
    loss, m = ppo_clip(PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, dual_clip=3.0)
    _tight(loss, (-1.2 + 0.8 - 0.5 + 3.0) / 4)  # token d capped at -A c = 3 -> 0.525
    _tight(m["clipfrac_dual"], 0.25)
    loss, m = ppo_clip(PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, clip_high=0.28)
    _tight(loss, (-1.28 + 0.8 - 0.5 + 4.0) / 4)  # DAPO clip-higher: a clipped at 1.28 -> 0.755


def test_ppo_clip_gradient_hand_derived():
    # token-mean over 4 tokens: only c (-0.5 / 4) and d (4 / 4, or 0 with dual clip) move.
    grad = jax.grad(lambda x: ppo_clip(x, PPO_OLD, PPO_ADV, PPO_MASK)[0])(PPO_LOGP)
    _tight(grad, [[0.0, 0.0, -0.125], [1.0, 0.0, 0.0]])
    grad = jax.grad(lambda x: ppo_clip(x, PPO_OLD, PPO_ADV, PPO_MASK, dual_clip=3.0)[0])(PPO_LOGP)
    _tight(grad, [[0.0, 0.0, -0.125], [0.0, 0.0, 0.0]])
    # No gradient into the old log-probs or the advantages: they are data.
    grad_old = jax.grad(lambda o: ppo_clip(PPO_LOGP, o, PPO_ADV, PPO_MASK)[0])(PPO_OLD)
    _tight(grad_old, jnp.zeros((2, 3)))


def test_ppo_clip_gradient_finite_differences():
    with jax.enable_x64(True):
        logp = jnp.asarray(PPO_LOGP, jnp.float64)  # ratios 1.5, 0.5, 4: away from the kinks
        f = lambda x: ppo_clip(x, PPO_OLD, PPO_ADV, PPO_MASK, dual_clip=3.0)[0]  # noqa: E731
        check_grads(f, (logp,), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)
        # Small moves around r = 1: the unclipped surrogate everywhere.
        rng = np.random.default_rng(0)
        logp = jnp.asarray(0.05 * rng.normal(size=(2, 3)))
        f = lambda x: ppo_clip(x, PPO_OLD, PPO_ADV, PPO_MASK, agg="seq-mean-token-mean")[0]  # noqa: E731
        check_grads(f, (logp,), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def test_ppo_clip_per_sequence_advantage_is_broadcast():
    adv_b = jnp.array([1.0, -1.0])
    out_b = ppo_clip(PPO_LOGP, PPO_OLD, adv_b, PPO_MASK)
    out_bt = ppo_clip(PPO_LOGP, PPO_OLD, jnp.broadcast_to(adv_b[:, None], (2, 3)), PPO_MASK)
    jax.tree.map(_tight, out_b, out_bt)


def test_ppo_clip_importance_weights():
    w = jnp.array([[2.0, 1.0, 1.0], [0.5, 1.0, 1.0]])
    loss, _ = ppo_clip(PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, is_weights_bt=w)
    _tight(loss, (2 * -1.2 + 0.8 - 0.5 + 0.5 * 4.0) / 4)  # -0.1 / 4 = -0.025
    grad = jax.grad(lambda x: ppo_clip(x, PPO_OLD, PPO_ADV, PPO_MASK, is_weights_bt=w)[0])(PPO_LOGP)
    _tight(grad, [[0.0, 0.0, -0.125], [0.5, 0.0, 0.0]])


def test_ppo_clip_jit_matches_eager():
    _jit_matches_eager(
        lambda x, o, a, m: ppo_clip(x, o, a, m, dual_clip=3.0), PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK
    )


@pytest.mark.parametrize("mode", AGG_MODES)
def test_ppo_clip_four_micro_batches_combine(mode):
    rng = np.random.default_rng(3)
    logp = jnp.asarray(-rng.random((8, 5)), jnp.float32)
    old = logp + jnp.asarray(0.3 * rng.normal(size=(8, 5)), jnp.float32)
    adv_b = jnp.asarray(rng.normal(size=(8,)), jnp.float32)
    mask = jnp.asarray(rng.random((8, 5)) < 0.7, jnp.int32).at[5].set(0)
    loss_fn = lambda x, o, a, m, **kw: ppo_clip(x, o, a, m, agg=mode, dual_clip=3.0, **kw)[0]  # noqa: E731
    full, full_grad = jax.value_and_grad(loss_fn)(logp, old, adv_b, mask)
    count = aggregate_count(mask, mode=mode)
    total, grads = 0.0, []
    for i in range(0, 8, 2):
        sl = slice(i, i + 2)
        part, g = jax.value_and_grad(loss_fn)(
            logp[sl], old[sl], adv_b[sl], mask[sl], agg_count=count
        )
        total, grads = total + part, grads + [g]
    _tight(total, full)
    _tight(jnp.concatenate(grads), full_grad)


def test_ppo_clip_errors_at_trace_time():
    with pytest.raises(AssertionError, match=r"ppo_clip: adv_bt must be \[B, T\] or \[B\]"):
        jax.jit(lambda a: ppo_clip(PPO_LOGP, PPO_OLD, a, PPO_MASK))(jnp.zeros((2, 3, 1)))
    with pytest.raises(AssertionError, match=r"ppo_clip: adv_bt has shape \(3,\), expected \[B\]"):
        ppo_clip(PPO_LOGP, PPO_OLD, jnp.zeros(3), PPO_MASK)
    with pytest.raises(AssertionError, match=r"ppo_clip: old_logp_bt has shape \(2, 2\)"):
        ppo_clip(PPO_LOGP, PPO_OLD[:, :2], PPO_ADV, PPO_MASK)
    with pytest.raises(AssertionError, match=r"ppo_clip: is_weights_bt has shape \(2, 2\)"):
        ppo_clip(PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, is_weights_bt=jnp.ones((2, 2)))
    with pytest.raises(ValueError, match=r"ppo_clip: dual_clip=0.5 must be > 1"):
        ppo_clip(PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, dual_clip=0.5)
    with pytest.raises(ValueError, match=r"unknown mode='mean'"):
        ppo_clip(PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, agg="mean")


def test_ratio_metrics_hand_worked_jit_and_no_gradient():
    log_ratio = jnp.log(jnp.array([[2.0, 0.5, 7.0]]))
    mask = jnp.array([[1, 1, 0]])
    m = ratio_metrics(log_ratio, mask)
    _tight(m["ratio_mean"], 1.25)  # (2 + 0.5) / 2
    _tight(m["ratio_min"], 0.5)
    _tight(m["ratio_max"], 2.0)
    _tight(m["approx_kl_k1"], 0.0)  # -(ln 2 + ln 0.5) / 2
    _tight(m["approx_kl"], (1 - math.log(2) - 0.5 + math.log(2)) / 2)  # (0.306853 + 0.193147) / 2
    _tight(ratio_metrics(log_ratio, jnp.zeros_like(mask))["ratio_min"], 1.0)  # nothing valid
    jax.tree.map(_tight, jax.jit(ratio_metrics)(log_ratio, mask), m)
    grad = jax.grad(lambda x: ratio_metrics(x, mask)["approx_kl"])(log_ratio)
    _tight(grad, jnp.zeros_like(log_ratio))  # metrics never carry gradient


# ---------------------------------------------------------------------------- GSPO
# Row 0: 2 valid tokens, log-ratios 0.1, 0.3 -> mean 0.2 -> s_0 = e^0.2 = 1.2214028
# Row 1: 3 valid tokens, log-ratios -0.3, 0, -0.3 -> mean -0.2 -> s_1 = e^-0.2 = 0.8187308
# With A = 1 and clip 0.1: row 0 -> max(-1.2214, -1.1) = -1.1 (clipped), row 1 -> -0.8187308.
GSPO_LOGP = jnp.array([[0.1, 0.3, 9.0], [-0.3, 0.0, -0.3]])
GSPO_OLD = jnp.zeros((2, 3))
GSPO_MASK = jnp.array([[1, 1, 0], [1, 1, 1]])
GSPO_ADV = jnp.array([1.0, 1.0])


def _gspo_sequence_level(logp, old, adv_b, mask, eps):
    """GSPO's sequence-level objective, eq. (5), written directly."""
    m = mask.astype(logp.dtype)
    s_b = jnp.exp(((logp - old) * m).sum(-1) / m.sum(-1))
    return jnp.maximum(-adv_b * s_b, -adv_b * jnp.clip(s_b, 1 - eps, 1 + eps)).mean()


def test_gspo_hand_worked():
    loss, m = gspo(GSPO_LOGP, GSPO_OLD, GSPO_ADV, GSPO_MASK, clip_low=0.1, clip_high=0.1)
    _tight(loss, (-1.1 - math.exp(-0.2)) / 2)  # -0.9593654
    _tight(m["clipfrac"], 2 / 5)  # the 2 tokens of row 0
    _tight(m["seq_ratio_mean"], (math.exp(0.2) + math.exp(-0.2)) / 2)
    _tight(m["seq_ratio_max"], math.exp(0.2))


def test_gspo_gradient_matches_sequence_level_objective():
    kw = dict(clip_low=0.1, clip_high=0.1)
    grad = jax.grad(lambda x: gspo(x, GSPO_OLD, GSPO_ADV, GSPO_MASK, **kw)[0])(GSPO_LOGP)
    # Row 0 is clipped: 0. Row 1: -A s_1 / (3 tokens * 2 sequences) = -0.8187308 / 6 per token.
    _tight(grad, [[0.0, 0.0, 0.0], [-math.exp(-0.2) / 6] * 3])
    ref = jax.grad(lambda x: _gspo_sequence_level(x, GSPO_OLD, GSPO_ADV, GSPO_MASK, 0.1))(GSPO_LOGP)
    _tight(grad, ref)


def test_gspo_gradient_finite_differences():
    # The token form's value is the sequence-level value, so finite differences see the same
    # gradient as the stop-gradient construction.
    with jax.enable_x64(True):
        logp = jnp.asarray(GSPO_LOGP, jnp.float64)
        adv = jnp.array([0.7, -1.3])
        f = lambda x: gspo(x, GSPO_OLD, adv, GSPO_MASK, clip_low=0.5, clip_high=0.5)[0]  # noqa: E731
        check_grads(f, (logp,), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def test_gspo_jit_matches_eager():
    _jit_matches_eager(gspo, GSPO_LOGP, GSPO_OLD, GSPO_ADV, GSPO_MASK)


def test_gspo_bad_shape_raises():
    with pytest.raises(AssertionError, match=r"gspo: mask_bt has shape \(2, 2\)"):
        gspo(GSPO_LOGP, GSPO_OLD, GSPO_ADV, GSPO_MASK[:, :2])


# ---------------------------------------------------------------------------- CISPO
# Ratios 1.5 and 0.5 (old log-probs 0), A = +1, -1, clip_high = 0.28, no lower bound:
#   w = 1.28, 0.5;  l = -w A logp = -1.28 ln 1.5, -0.5 * (-1) * ln 0.5
CISPO_LOGP = jnp.log(jnp.array([[1.5, 0.5]]))
CISPO_OLD = jnp.zeros((1, 2))
CISPO_ADV = jnp.array([[1.0, -1.0]])
CISPO_MASK = jnp.ones((1, 2))


def test_cispo_hand_worked():
    loss, m = cispo(CISPO_LOGP, CISPO_OLD, CISPO_ADV, CISPO_MASK)
    _tight(loss, (-1.28 * math.log(1.5) + 0.5 * math.log(0.5)) / 2)  # (-0.518995 - 0.346574) / 2
    _tight(m["clipfrac_high"], 0.5)
    _tight(m["clipfrac_low"], 0.0)
    loss, m = cispo(CISPO_LOGP, CISPO_OLD, CISPO_ADV, CISPO_MASK, clip_low=0.2)
    _tight(loss, (-1.28 * math.log(1.5) + 0.8 * math.log(0.5)) / 2)  # w_1 raised to 0.8
    _tight(m["clipfrac_low"], 0.5)


def test_cispo_gradient_hand_derived():
    # d l / d logp = -w A (the weight is stop-gradient), / 2 tokens: -1.28 / 2, 0.5 / 2.
    grad = jax.grad(lambda x: cispo(x, CISPO_OLD, CISPO_ADV, CISPO_MASK)[0])(CISPO_LOGP)
    _tight(grad, [[-0.64, 0.25]])
    grad = jax.grad(lambda x: cispo(x, CISPO_OLD, CISPO_ADV, CISPO_MASK, clip_low=0.2)[0])(
        CISPO_LOGP
    )
    _tight(grad, [[-0.64, 0.4]])


def test_cispo_gradient_equals_clipped_ratio_policy_gradient():
    # The CISPO gradient is E[clip(r) A grad logp]; compare on random data with a hand-written
    # surrogate whose gradient is that by construction.
    rng = np.random.default_rng(4)
    logp = jnp.asarray(-rng.random((3, 4)), jnp.float32)
    old = logp + jnp.asarray(0.4 * rng.normal(size=(3, 4)), jnp.float32)
    adv = jnp.asarray(rng.normal(size=(3, 4)), jnp.float32)
    mask = jnp.ones((3, 4))

    def surrogate(x):
        w = jnp.clip(jnp.exp(jax.lax.stop_gradient(x) - old), None, 1.28)
        return -(w * adv * x).mean()

    grad = jax.grad(lambda x: cispo(x, old, adv, mask)[0])(logp)
    _tight(grad, jax.grad(surrogate)(logp))


def test_cispo_jit_matches_eager():
    _jit_matches_eager(cispo, CISPO_LOGP, CISPO_OLD, CISPO_ADV, CISPO_MASK)


# ---------------------------------------------------------------------------- REINFORCE
# l = -A logp: (0,0) -2 * -1 = 2, (0,1) -2 * -2 = 4, (1,0) 1 * -0.5 = -0.5 -> 5.5 / 3 tokens
RF_LOGP = jnp.array([[-1.0, -2.0], [-0.5, -7.0]])
RF_ADV = jnp.array([2.0, -1.0])
RF_MASK = jnp.array([[1, 1], [1, 0]])


def test_reinforce_hand_worked():
    loss, m = reinforce(RF_LOGP, RF_ADV, RF_MASK)
    _tight(loss, 5.5 / 3)
    _tight(m["adv_mean"], (2.0 + 2.0 - 1.0) / 3)
    _tight(m["logp_mean"], -3.5 / 3)
    loss, _ = reinforce(RF_LOGP, RF_ADV, RF_MASK, agg="seq-mean-token-sum")
    _tight(loss, (6.0 - 0.5) / 2)


def test_reinforce_gradients():
    grad = jax.grad(lambda x: reinforce(x, RF_ADV, RF_MASK)[0])(RF_LOGP)
    _tight(grad, [[-2 / 3, -2 / 3], [1 / 3, 0.0]])  # -A / 3 tokens
    w = jnp.array([[0.5, 1.0], [2.0, 1.0]])
    grad = jax.grad(lambda x: reinforce(x, RF_ADV, RF_MASK, is_weights_bt=w)[0])(RF_LOGP)
    _tight(grad, [[-1 / 3, -2 / 3], [2 / 3, 0.0]])
    with jax.enable_x64(True):
        f = lambda x: reinforce(x, RF_ADV, RF_MASK)[0]  # noqa: E731
        check_grads(
            f,
            (jnp.asarray(RF_LOGP, jnp.float64),),
            order=1,
            modes=["rev"],
            eps=1e-6,
            atol=1e-6,
            rtol=1e-6,
        )


def test_reinforce_jit_matches_eager():
    _jit_matches_eager(reinforce, RF_LOGP, RF_ADV, RF_MASK)


def test_reinforce_bad_shape_raises():
    with pytest.raises(AssertionError, match=r"reinforce: mask_bt must be \[B, T\]"):
        reinforce(RF_LOGP, RF_ADV, RF_MASK[0])


# ---------------------------------------------------------------------------- entropy bonus
def test_entropy_bonus():
    ent = jnp.array([[1.0, 2.0], [3.0, 40.0]])
    mask = jnp.array([[1, 1], [1, 0]])
    loss, m = entropy_bonus(ent, mask)
    _tight(loss, -(1.0 + 2.0 + 3.0) / 3)  # -2
    _tight(m["entropy"], 2.0)
    grad = jax.grad(lambda e: entropy_bonus(e, mask)[0])(ent)
    _tight(grad, [[-1 / 3, -1 / 3], [-1 / 3, 0.0]])
    with jax.enable_x64(True):
        f = lambda e: entropy_bonus(e**2, mask, agg="seq-mean-token-mean")[0]  # noqa: E731
        check_grads(
            f,
            (jnp.asarray(ent, jnp.float64),),
            order=1,
            modes=["rev"],
            eps=1e-6,
            atol=1e-6,
            rtol=1e-6,
        )
    _jit_matches_eager(entropy_bonus, ent, mask)
    with pytest.raises(AssertionError, match=r"entropy_bonus: mask_bt has shape \(2, 1\)"):
        entropy_bonus(ent, mask[:, :1])
