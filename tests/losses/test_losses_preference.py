"""Tests for jaxrl_llm.losses.preference: DPO (sigmoid, IPO, hinge) and RRHF."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxrl_llm.losses import dpo, kto, orpo, rrhf, simpo


def _tight(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def _softplus(x):
    return math.log1p(math.exp(x))


# Pair 0: h = (pc - pr) - (rc - rr) = (-1 + 3) - 0 = 2; pair 1: h = (-2 + 1) - 0 = -1.
PC = jnp.array([-1.0, -2.0])
PR = jnp.array([-3.0, -1.0])
RC = jnp.array([-2.0, -2.0])
RR = jnp.array([-2.0, -2.0])


def test_dpo_sigmoid_hand_worked():
    loss, m = dpo(PC, PR, RC, RR, beta=0.5)
    # -log sigmoid(beta h) = softplus(-beta h): softplus(-1) = 0.3132617, softplus(0.5) = 0.9740770
    _tight(loss, (_softplus(-1.0) + _softplus(0.5)) / 2)
    _tight(m["chosen_rewards"], (0.5 * 1.0 + 0.0) / 2)  # beta (pc - rc)
    _tight(m["rejected_rewards"], (0.5 * -1.0 + 0.5 * 1.0) / 2)  # beta (pr - rr)
    _tight(m["reward_margin"], 0.25)
    _tight(m["reward_accuracy"], 0.5)  # 0.5 > -0.5 yes, 0 > 0.5 no
    # cDPO, e = 0.1: (1 - e) softplus(-beta h) + e softplus(beta h), averaged over the 2 pairs.
    loss, _ = dpo(PC, PR, RC, RR, beta=0.5, label_smoothing=0.1)
    pair0 = 0.9 * _softplus(-1.0) + 0.1 * _softplus(1.0)  # 0.4132617
    pair1 = 0.9 * _softplus(0.5) + 0.1 * _softplus(-0.5)  # 0.9240770
    _tight(loss, (pair0 + pair1) / 2)


def test_dpo_ipo_and_hinge_hand_worked():
    loss, _ = dpo(PC, PR, RC, RR, beta=0.5, loss_type="ipo")
    _tight(loss, ((2 - 1) ** 2 + (-1 - 1) ** 2) / 2)  # (h - 1/(2 beta))^2 = 1, 4 -> 2.5
    loss, _ = dpo(PC, PR, RC, RR, beta=0.25, loss_type="hinge")
    _tight(loss, (0.5 + 1.25) / 2)  # relu(1 - beta h) = relu(0.5), relu(1.25)


def test_dpo_gradients_hand_derived():
    grad_fn = lambda **kw: jax.grad(lambda pc, pr: dpo(pc, pr, RC, RR, **kw)[0], argnums=(0, 1))  # noqa: E731
    # sigmoid: d/dpc = -beta sigmoid(-beta h) / B
    g_pc, g_pr = grad_fn(beta=0.5)(PC, PR)
    expected = [-0.5 * _sigmoid(-1.0) / 2, -0.5 * _sigmoid(0.5) / 2]  # -0.0672354, -0.1556148
    _tight(g_pc, expected)
    _tight(g_pr, [-g for g in expected])
    # ipo: d/dpc = 2 (h - 1/(2 beta)) / B = h - 1
    g_pc, _ = grad_fn(beta=0.5, loss_type="ipo")(PC, PR)
    _tight(g_pc, [1.0, -2.0])
    # hinge: d/dpc = -beta / B where the hinge is active (both pairs with beta = 0.25)
    g_pc, _ = grad_fn(beta=0.25, loss_type="hinge")(PC, PR)
    _tight(g_pc, [-0.125, -0.125])
    # The reference log-probs are data.
    g_rc = jax.grad(lambda rc: dpo(PC, PR, rc, RR, beta=0.5)[0])(RC)
    _tight(g_rc, [0.0, 0.0])


@pytest.mark.parametrize(
    "kw",
    [
        dict(loss_type="sigmoid"),
        dict(loss_type="sigmoid", label_smoothing=0.2),
        dict(loss_type="ipo"),
        dict(loss_type="hinge"),
    ],
)
def test_dpo_gradient_finite_differences(kw):
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        pc, pr = (jnp.asarray(-rng.random(4) * 3) for _ in range(2))
        f = lambda pc, pr: dpo(pc, pr, RC[:1].repeat(4), RR[:1].repeat(4), beta=0.3, **kw)[0]  # noqa: E731
        check_grads(f, (pc, pr), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
def test_dpo_jit_matches_eager(loss_type):
    fn = functools.partial(dpo, beta=0.5, loss_type=loss_type)
    jax.tree.map(_tight, jax.jit(fn)(PC, PR, RC, RR), fn(PC, PR, RC, RR))


def test_dpo_errors():
    with pytest.raises(ValueError, match=r"dpo: unknown loss_type='kto'"):
        jax.jit(lambda pc: dpo(pc, PR, RC, RR, beta=0.1, loss_type="kto"))(PC)
    with pytest.raises(
        ValueError, match=r"dpo: label_smoothing=0.1 is only used by loss_type='sigmoid'"
    ):
        dpo(PC, PR, RC, RR, beta=0.1, loss_type="ipo", label_smoothing=0.1)
    with pytest.raises(ValueError, match=r"dpo: beta=0 must be > 0"):
        dpo(PC, PR, RC, RR, beta=0)
    with pytest.raises(AssertionError, match=r"dpo: ref_rejected_logp_b has shape \(3,\)"):
        dpo(PC, PR, RC, jnp.zeros(3), beta=0.1)
    with pytest.raises(AssertionError, match=r"dpo: policy_chosen_logp_b must be \[B\]"):
        dpo(PC[None], PR[None], RC[None], RR[None], beta=0.1)


# RRHF, one prompt, three responses (T = 2):
#   response 0: logp -1, -1 (2 tokens) -> p_0 = -1     reward 1
#   response 1: logp -0.5   (1 token)  -> p_1 = -0.5   reward 0
#   response 2: logp -2, -4 (2 tokens) -> p_2 = -3     reward 2 (the best)
# Pairs with r_i < r_j: (1, 0): max(0, -0.5 + 1) = 0.5; (1, 2): 2.5; (0, 2): max(0, -1 + 3) = 2
# L_rank = 5, L_ft = -mean(-2, -4) = 3 -> loss = 8.
RR_LOGP = jnp.array([[[-1.0, -1.0], [-0.5, -9.0], [-2.0, -4.0]]])
RR_MASK = jnp.array([[[1, 1], [1, 0], [1, 1]]])
RR_REWARDS = jnp.array([[1.0, 0.0, 2.0]])


def test_rrhf_hand_worked():
    loss, m = rrhf(RR_LOGP, RR_MASK, RR_REWARDS)
    _tight(loss, 8.0)
    _tight(m["rank_loss"], 5.0)
    _tight(m["ft_loss"], 3.0)
    loss, _ = rrhf(RR_LOGP, RR_MASK, RR_REWARDS, rank_weight=0.5)
    _tight(loss, 0.5 * 5.0 + 3.0)
    # length_penalty = 0: scores are sums -2, -0.5, -6 -> pairs 1.5 + 5.5 + 4 = 11, plus 3.
    loss, _ = rrhf(RR_LOGP, RR_MASK, RR_REWARDS, length_penalty=0.0)
    _tight(loss, 14.0)


def test_rrhf_without_fine_tuning_on_tied_groups():
    # group 0 is the hand-worked one; group 1's rewards all tie: rank 0, and its fine-tuning
    # term (mean logp of its first response) is kept only with ft_on_ties
    logp = jnp.concatenate([RR_LOGP, RR_LOGP], axis=0)
    mask = jnp.concatenate([RR_MASK, RR_MASK], axis=0)
    rewards = jnp.concatenate([RR_REWARDS, jnp.zeros_like(RR_REWARDS)], axis=0)
    first_mean = float((RR_LOGP[0, 0] * RR_MASK[0, 0]).sum() / RR_MASK[0, 0].sum())
    loss, m = rrhf(logp, mask, rewards)
    _tight(loss, (8.0 - first_mean) / 2)
    loss, m = rrhf(logp, mask, rewards, ft_on_ties=False)
    _tight(loss, 8.0 / 2)
    _tight(m["ft_groups"], 0.5)


def test_rrhf_gradient_hand_derived():
    # d L_rank / d p = (0, +2, -2) from the pairs above; d L_ft / d p_2 = -1; d p_i / d logp = 1/n_i.
    grad = jax.grad(lambda x: rrhf(x, RR_MASK, RR_REWARDS)[0])(RR_LOGP)
    _tight(grad, [[[0.0, 0.0], [2.0, 0.0], [-1.5, -1.5]]])


def test_rrhf_gradient_finite_differences_and_jit():
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        logp = jnp.asarray(-rng.random((2, 3, 4)) * 2)
        mask = jnp.asarray(rng.random((2, 3, 4)) < 0.8).at[:, :, 0].set(True)
        rewards = jnp.asarray(rng.normal(size=(2, 3)))
        f = lambda x: rrhf(x, mask, rewards)[0]  # noqa: E731
        check_grads(f, (logp,), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)
    jax.tree.map(
        _tight, jax.jit(rrhf)(RR_LOGP, RR_MASK, RR_REWARDS), rrhf(RR_LOGP, RR_MASK, RR_REWARDS)
    )


def test_rrhf_errors():
    with pytest.raises(
        AssertionError, match=r"rrhf: rewards_bg \(1, 2\) must be the \[B, G\] of logp_bgt"
    ):
        rrhf(RR_LOGP, RR_MASK, RR_REWARDS[:, :2])
    with pytest.raises(AssertionError, match=r"rrhf: mask_bgt has shape \(1, 3, 1\)"):
        jax.jit(lambda x: rrhf(x, RR_MASK[..., :1], RR_REWARDS))(RR_LOGP)


def test_dpo_weights_drop_a_pair_from_loss_and_metrics():
    weighted, m = dpo(PC, PR, RC, RR, beta=0.5, weights_b=jnp.array([1.0, 0.0]))
    alone, m0 = dpo(PC[:1], PR[:1], RC[:1], RR[:1], beta=0.5)
    _tight(weighted, alone)
    _tight(m["reward_accuracy"], m0["reward_accuracy"])
    # all weights zero: a zero loss with no NaN (a step whose pairs all tie)
    zero, _ = dpo(PC, PR, RC, RR, beta=0.5, weights_b=jnp.zeros(2))
    _tight(zero, 0.0)
    grads = jax.grad(lambda pc: dpo(pc, PR, RC, RR, beta=0.5, weights_b=jnp.zeros(2))[0])(PC)
    _tight(grads, jnp.zeros(2))


def test_kto_hand_worked():
    # r = pi - ref = [1, -1, 0.5]; desirable, undesirable, desirable; z0 given as 0.2.
    pi, ref = jnp.array([-1.0, -3.0, -1.5]), jnp.array([-2.0, -2.0, -2.0])
    good = jnp.array([True, False, True])
    loss, m = kto(pi, ref, good, beta=0.5, reference_point=0.2, undesirable_weight=2.0)
    d0 = 1 - _sigmoid(0.5 * (1.0 - 0.2))
    u1 = 2.0 * (1 - _sigmoid(0.5 * (0.2 + 1.0)))
    d2 = 1 - _sigmoid(0.5 * (0.5 - 0.2))
    _tight(loss, (d0 + u1 + d2) / 3)
    _tight(m["desirable_rewards"], 0.5 * (1.0 + 0.5) / 2)
    _tight(m["undesirable_rewards"], -0.5)
    # batch estimate: z0 = max(0, mean r) = max(0, 1/6); a negative estimate clips to 0
    _, m = kto(pi, ref, good, beta=0.5)
    _tight(m["reference_point"], 0.5 / 3)
    _, m = kto(pi - 5.0, ref, good, beta=0.5)
    _tight(m["reference_point"], 0.0)
    # the gradient raises a desirable completion's log-prob and lowers an undesirable one's
    g = jax.grad(lambda p: kto(p, ref, good, beta=0.5, reference_point=0.2)[0])(pi)
    assert g[0] < 0 and g[1] > 0 and g[2] < 0


def test_simpo_hand_worked():
    # chosen: -2 over 2 tokens (mean -1), rejected: -6 over 3 tokens (mean -2)
    pc, pr = jnp.array([-2.0, -6.0]), jnp.array([-6.0, -2.0])
    nc, nr = jnp.array([2, 3]), jnp.array([3, 2])
    loss, m = simpo(pc, pr, nc, nr, beta=2.0, gamma=0.5)
    # pair 0: h = 2(-1) - 2(-2) - 0.5 = 1.5; pair 1: h = 2(-2) - 2(-1) - 0.5 = -2.5
    _tight(loss, (_softplus(-1.5) + _softplus(2.5)) / 2)
    _tight(m["reward_margin"], (2.0 - 2.0) / 2)
    _tight(m["reward_accuracy"], 0.5)
    smoothed, _ = simpo(pc, pr, nc, nr, beta=2.0, gamma=0.5, label_smoothing=0.1)
    pair0 = 0.9 * _softplus(-1.5) + 0.1 * _softplus(1.5)
    pair1 = 0.9 * _softplus(2.5) + 0.1 * _softplus(-2.5)
    _tight(smoothed, (pair0 + pair1) / 2)


def test_orpo_hand_worked():
    # mean log-probs: chosen log(0.5) (odds 1), rejected log(0.2) (odds 0.25)
    pc, pr = jnp.array([2 * math.log(0.5)]), jnp.array([3 * math.log(0.2)])
    loss, m = orpo(pc, pr, jnp.array([2]), jnp.array([3]), lam=0.1)
    log_ratio = math.log(1.0) - math.log(0.25)
    np.testing.assert_allclose(m["log_odds_ratio"], log_ratio, rtol=1e-5)
    np.testing.assert_allclose(m["sft_loss"], -math.log(0.5), rtol=1e-6)
    np.testing.assert_allclose(loss, -math.log(0.5) + 0.1 * _softplus(-log_ratio), rtol=1e-5)
    assert float(m["reward_accuracy"]) == 1.0
    # lam = 0 is fine-tuning on the chosen completion alone
    sft, _ = orpo(pc, pr, jnp.array([2]), jnp.array([3]), lam=0.0)
    np.testing.assert_allclose(sft, -math.log(0.5), rtol=1e-6)


def test_reference_free_losses_check_shapes_and_hyperparameters():
    two, one = jnp.zeros(2), jnp.zeros(1)
    with pytest.raises(AssertionError, match="simpo"):
        simpo(two, one, two, two)
    with pytest.raises(ValueError, match="beta"):
        simpo(two, two, two, two, beta=0.0)
    with pytest.raises(ValueError, match="lam"):
        orpo(two, two, two, two, lam=-1.0)
    with pytest.raises(ValueError, match="beta"):
        kto(two, two, two > 0, beta=0.0)
