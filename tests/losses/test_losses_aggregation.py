"""Tests for jaxrl_llm.losses.aggregation: hand-worked values, gradients, jit, micro-batching."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxrl_llm.losses import aggregate, aggregate_count, aggregate_sums, masked_mean
from jaxrl_llm.losses.aggregation import AGG_MODES

# Row 0 has 3 valid tokens, row 1 has 2, row 2 is all padding (and carries junk, even NaN).
LOSS_BT = jnp.array(
    [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, jnp.nan, 11.0, 12.0]], jnp.float32
)
MASK_BT = jnp.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], jnp.int32)

# Hand-worked: valid values 1, 2, 3 | 5, 6; sequence sums 6 and 11; 2 non-empty sequences.
EXPECTED = {
    "token-mean": 17.0 / 5.0,  # (1 + 2 + 3 + 5 + 6) / 5 tokens = 3.4
    "seq-mean-token-sum": 17.0 / 2.0,  # (6 + 11) / 2 sequences = 8.5
    "seq-mean-token-mean": 3.75,  # (6 / 3 + 11 / 2) / 2 = (2 + 5.5) / 2
    "seq-mean-token-sum-norm": 17.0 / 8.0,  # (6 / 4 + 11 / 4) / 2 with norm_len = T = 4
}
# d loss / d loss_bt on valid tokens, by row; 0 on padding.
EXPECTED_GRAD_ROW = {
    "token-mean": (1 / 5, 1 / 5),  # 1 / tokens
    "seq-mean-token-sum": (1 / 2, 1 / 2),  # 1 / sequences
    "seq-mean-token-mean": (1 / 6, 1 / 4),  # 1 / (n_b * sequences): 1 / (3 * 2), 1 / (2 * 2)
    "seq-mean-token-sum-norm": (1 / 8, 1 / 8),  # 1 / (T * sequences) = 1 / (4 * 2)
}


def _tight(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_hand_worked_values(mode):
    _tight(aggregate(LOSS_BT, MASK_BT, mode=mode), EXPECTED[mode])


def test_sums_and_counts_hand_worked():
    # token-mean: total 17 over 5 tokens; seq modes count the 2 non-empty sequences.
    assert aggregate_sums(LOSS_BT, MASK_BT, mode="token-mean") == (17.0, 5.0)
    assert aggregate_sums(LOSS_BT, MASK_BT, mode="seq-mean-token-sum") == (17.0, 2.0)
    assert aggregate_sums(LOSS_BT, MASK_BT, mode="seq-mean-token-mean") == (7.5, 2.0)
    # norm_len = 10: (6 + 11) / 10 = 1.7 over 2 sequences -> 0.85
    sums = aggregate_sums(LOSS_BT, MASK_BT, mode="seq-mean-token-sum-norm", norm_len=10)
    _tight(sums.total, 1.7)
    _tight(aggregate(LOSS_BT, MASK_BT, mode="seq-mean-token-sum-norm", norm_len=10), 0.85)
    assert aggregate_count(MASK_BT, mode="token-mean") == 5.0
    assert aggregate_count(MASK_BT, mode="seq-mean-token-mean") == 2.0


def test_empty_batch_gives_zero():
    zeros = jnp.zeros_like(MASK_BT)
    for mode in AGG_MODES:
        assert aggregate(LOSS_BT, zeros, mode=mode) == 0.0


def test_masked_mean():
    # (1 + 2 + 3 + 5 + 6) / 5 = 3.4 overall; per row 2, 5.5, and 0 for the empty row.
    _tight(masked_mean(LOSS_BT, MASK_BT), 3.4)
    _tight(masked_mean(LOSS_BT, MASK_BT, axis=-1), [2.0, 5.5, 0.0])


def test_count_and_masked_mean_jit_and_gradient():
    for mode in AGG_MODES:
        fn = functools.partial(aggregate_count, mode=mode)
        _tight(jax.jit(fn)(MASK_BT), fn(MASK_BT))
    _tight(jax.jit(masked_mean)(LOSS_BT, MASK_BT), masked_mean(LOSS_BT, MASK_BT))
    # d masked_mean / dx = m / sum(m) = 1/5 on the 5 valid entries
    grad = jax.grad(masked_mean)(LOSS_BT, MASK_BT)
    _tight(grad, MASK_BT / 5.0)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_gradient_hand_derived(mode):
    grad = jax.grad(lambda x: aggregate(x, MASK_BT, mode=mode))(LOSS_BT)
    g0, g1 = EXPECTED_GRAD_ROW[mode]
    expected = jnp.array([[g0, g0, g0, 0.0], [g1, g1, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    _tight(grad, expected)  # also: no NaN leaks from the padded NaN


@pytest.mark.parametrize("mode", AGG_MODES)
def test_gradient_finite_differences(mode):
    with jax.enable_x64(True):
        x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)))
        f = lambda x: aggregate(x**2, MASK_BT, mode=mode)  # noqa: E731
        check_grads(f, (x,), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_jit_matches_eager(mode):
    fn = functools.partial(aggregate, mode=mode)
    _tight(jax.jit(fn)(LOSS_BT, MASK_BT), fn(LOSS_BT, MASK_BT))
    sums_jit = jax.jit(functools.partial(aggregate_sums, mode=mode))(LOSS_BT, MASK_BT)
    _tight(sums_jit.total, aggregate_sums(LOSS_BT, MASK_BT, mode=mode).total)


def _micro_batch_setup():
    rng = np.random.default_rng(1)
    x_bt = jnp.asarray(rng.normal(size=(8, 6)), jnp.float32)
    mask_bt = jnp.asarray(rng.random((8, 6)) < 0.6, jnp.int32)
    mask_bt = mask_bt.at[3].set(0)  # an all-padding row inside one micro-batch
    w = jnp.asarray(rng.normal(size=(6,)), jnp.float32)
    return x_bt, mask_bt, w


def _per_token_loss(w, x_bt):
    return jnp.tanh(x_bt * w) + 0.5 * (x_bt * w) ** 2


@pytest.mark.parametrize("mode", AGG_MODES)
def test_four_micro_batches_combine_to_full_batch(mode):
    x_bt, mask_bt, w = _micro_batch_setup()
    norm_len = 16 if mode == "seq-mean-token-sum-norm" else None
    agg = functools.partial(aggregate, mode=mode, norm_len=norm_len)

    full_loss, full_grad = jax.value_and_grad(lambda w: agg(_per_token_loss(w, x_bt), mask_bt))(w)

    # The denominator depends on the mask only: count it over the full batch first.
    count = aggregate_count(mask_bt, mode=mode)
    parts = [(x_bt[i : i + 2], mask_bt[i : i + 2]) for i in range(0, 8, 2)]
    loss_sum, grad_sum = 0.0, jnp.zeros_like(w)
    for x_m, m_m in parts:
        loss_m, grad_m = jax.value_and_grad(
            lambda w, x_m=x_m, m_m=m_m: agg(_per_token_loss(w, x_m), m_m, count=count)
        )(w)
        loss_sum, grad_sum = loss_sum + loss_m, grad_sum + grad_m
    _tight(loss_sum, full_loss)
    _tight(grad_sum, full_grad)

    # The sums-and-counts form: add the parts' totals and counts, then divide once.
    sums = [
        aggregate_sums(_per_token_loss(w, x_m), m_m, mode=mode, norm_len=norm_len)
        for x_m, m_m in parts
    ]
    total = sum(s.total for s in sums)
    n = sum(s.count for s in sums)
    assert n == count
    _tight(total / n, full_loss)


def test_sums_form_is_exact_on_dyadic_values():
    # Values are multiples of 1/8 with small magnitudes: every float32 sum is exact, in any order,
    # so the combined micro-batch value equals the full-batch value bit for bit.
    rng = np.random.default_rng(2)
    loss_bt = jnp.asarray(rng.integers(-64, 64, size=(8, 5)) / 8.0, jnp.float32)
    mask_bt = jnp.asarray(rng.random((8, 5)) < 0.7, jnp.int32)
    for mode in ("token-mean", "seq-mean-token-sum"):
        full = aggregate(loss_bt, mask_bt, mode=mode)
        parts = [
            aggregate_sums(loss_bt[i : i + 2], mask_bt[i : i + 2], mode=mode)
            for i in range(0, 8, 2)
        ]
        combined = sum(p.total for p in parts) / sum(p.count for p in parts)
        np.testing.assert_array_equal(np.asarray(combined), np.asarray(full))


def test_unknown_mode_raises_at_trace_time():
    with pytest.raises(ValueError, match=r"aggregate: unknown mode='token-sum'"):
        jax.jit(lambda x: aggregate(x, MASK_BT, mode="token-sum"))(LOSS_BT)
    with pytest.raises(ValueError, match=r"unknown mode='bogus'"):
        aggregate_count(MASK_BT, mode="bogus")


def test_norm_len_with_other_mode_raises():
    with pytest.raises(
        ValueError, match=r"norm_len=8 is only used by mode='seq-mean-token-sum-norm'"
    ):
        aggregate(LOSS_BT, MASK_BT, mode="token-mean", norm_len=8)


def test_bad_shapes_raise_at_trace_time():
    with pytest.raises(AssertionError, match=r"aggregate: mask_bt has shape \(3, 3\) but loss_bt"):
        jax.jit(lambda x: aggregate(x, MASK_BT[:, :3], mode="token-mean"))(LOSS_BT)
    with pytest.raises(AssertionError, match=r"aggregate: loss_bt must be \[B, T\]"):
        aggregate(LOSS_BT[0], MASK_BT[0], mode="token-mean")
