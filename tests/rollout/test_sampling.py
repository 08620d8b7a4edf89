"""Sampling: hand-worked filters, support property over many draws, log-prob values, keys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.rollout import sampling

NEG_INF = -np.inf

# Jitted once per static option: eager op-by-op dispatch costs seconds on a 2-core CPU.
_filter = jax.jit(sampling.filter_logits, static_argnames=("top_k",))
_sample = jax.jit(sampling.sample_tokens, static_argnames=("top_k",))


def _probs_to_logits(p):
    return jnp.log(jnp.asarray(p, jnp.float32))


# ---- hand-worked filters ---------------------------------------------------------------------
def test_top_k_keeps_k_largest_and_ties():
    x = jnp.array([[1.0, 3.0, 2.0, 0.0], [1.0, 2.0, 2.0, 0.0]])
    out = np.asarray(_filter(x, top_k=2))
    np.testing.assert_array_equal(out[0], [NEG_INF, 3.0, 2.0, NEG_INF])
    # Row 1: the 2nd largest (2.0) is tied; both ties are >= it, 1.0 is not.
    np.testing.assert_array_equal(out[1], [NEG_INF, 2.0, 2.0, NEG_INF])
    # k >= V disables the filter.
    np.testing.assert_array_equal(np.asarray(_filter(x, top_k=4)), np.asarray(x))


@pytest.mark.parametrize(
    "top_p, kept",
    [(0.4, [0]), (0.75, [0, 1]), (0.85, [0, 1, 2]), (1.0, [0, 1, 2, 3])],
)
def test_top_p_smallest_prefix_reaching_mass(top_p, kept):
    # Probabilities 0.5, 0.3, 0.15, 0.05 (shuffled): the nucleus is the smallest prefix of the
    # sorted list whose mass reaches top_p.
    probs = np.array([0.15, 0.5, 0.05, 0.3])
    order = [1, 3, 0, 2]  # indices in decreasing probability
    out = np.asarray(_filter(_probs_to_logits([probs]), top_p_b=jnp.array([top_p])))[0]
    expected_kept = sorted(order[i] for i in kept)
    np.testing.assert_array_equal(np.flatnonzero(np.isfinite(out)), expected_kept)


def test_min_p_relative_to_max():
    probs = [[0.5, 0.3, 0.15, 0.05]]
    out = np.asarray(_filter(_probs_to_logits(probs), min_p_b=jnp.array([0.2])))
    # Keep p >= 0.2 * 0.5 = 0.1.
    np.testing.assert_array_equal(np.isfinite(out[0]), [True, True, True, False])
    out0 = _filter(_probs_to_logits(probs), min_p_b=jnp.array([0.0]))
    assert np.isfinite(np.asarray(out0)).all()


def test_top_p_after_top_k_renormalises():
    # top_k=3 leaves 0.5, 0.3, 0.15 -> renormalised 0.526, 0.316, 0.158; top_p=0.8 then needs the
    # first two (mass before the third is 0.842 >= 0.8).
    probs = [[0.5, 0.3, 0.15, 0.05]]
    out = _filter(_probs_to_logits(probs), top_k=3, top_p_b=jnp.array([0.8]))
    np.testing.assert_array_equal(np.isfinite(np.asarray(out[0])), [True, True, False, False])


# ---- sample_tokens values ---------------------------------------------------------------------
def test_logprobs_exact_values():
    probs = np.array([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]], np.float32)
    keys = sampling.sequence_keys(0, 2)
    temperature = jnp.array([0.5, 0.0])
    out = _sample(keys, _probs_to_logits(probs), temperature_b=temperature, top_k=3)
    # Row 0: logits / 0.5 -> p^2, top-3 kept and renormalised.
    p2 = probs[0, :3] ** 2 / np.sum(probs[0, :3] ** 2)
    t0 = int(out.tokens[0])
    assert t0 in (0, 1, 2)
    np.testing.assert_allclose(out.logprobs[0], np.log(p2[t0]), atol=1e-6)
    np.testing.assert_allclose(out.raw_logprobs[0], np.log(probs[0, t0]), atol=1e-6)
    # Row 1 is greedy: argmax, log-prob of a point mass 0, raw log-prob log 0.4.
    assert int(out.tokens[1]) == 3
    assert float(out.logprobs[1]) == 0.0
    np.testing.assert_allclose(out.raw_logprobs[1], np.log(0.4), atol=1e-6)


def _reference_support(logits, temperature, top_k, top_p, min_p):
    """Independent numpy (float64) definition of the kept set."""
    x = logits.astype(np.float64) / temperature
    keep = np.ones_like(x, bool)
    if top_k is not None:
        kth = np.sort(x)[::-1][top_k - 1]
        keep &= x >= kth
    if top_p is not None:
        p = np.where(keep, np.exp(x - x.max()), 0.0)
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]
        n_keep = max(int(np.sum(before < top_p)), 1)
        cut = p[order][n_keep - 1]
        keep &= p >= cut
    if min_p is not None:
        p = np.where(keep, np.exp(x - x.max()), 0.0)
        keep &= p >= min_p * p.max()
    return keep


@pytest.mark.parametrize(
    "vocab, scale, temperature, top_k, top_p, min_p",
    [
        (64, 2.0, 1.0, 5, None, None),
        (64, 2.0, 0.7, None, 0.6, None),
        (64, 2.0, 1.3, 20, 0.9, None),
        (64, 2.0, 1.0, None, None, 0.3),
        (64, 2.0, 2.0, 50, 0.8, 0.05),
        # Flat logits over 600 tokens: the nucleus holds ~500 tokens, more than the 64 top-k
        # candidates, so the exact bisection path runs; top_k > 256 also bisects.
        (600, 0.3, 1.0, None, 0.85, None),
        (600, 1.0, 1.0, 300, None, None),
        (600, 0.5, 1.0, 400, 0.7, 0.2),
    ],
)
def test_samples_never_leave_the_support(vocab, scale, temperature, top_k, top_p, min_p):
    n_dists, draws = 4, 512
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(n_dists, vocab)).astype(np.float32) * scale
    rows = np.repeat(logits, draws, axis=0)  # every distribution drawn `draws` times
    batch = rows.shape[0]
    keys = sampling.sequence_keys(1234, batch)
    out = _sample(
        keys,
        jnp.asarray(rows),
        temperature_b=jnp.full((batch,), temperature),
        top_k=top_k,
        top_p_b=None if top_p is None else jnp.full((batch,), top_p),
        min_p_b=None if min_p is None else jnp.full((batch,), min_p),
    )
    tokens = np.asarray(out.tokens).reshape(n_dists, draws)
    for d in range(n_dists):
        support = _reference_support(logits[d], temperature, top_k, top_p, min_p)
        assert support[tokens[d]].all(), f"dist {d}: sampled outside the support"
        # The draws follow the renormalised distribution (loose check of the frequencies).
        x = np.where(support, logits[d].astype(np.float64) / temperature, -np.inf)
        q = np.exp(x - x.max())
        q /= q.sum()
        freq = np.bincount(tokens[d], minlength=vocab) / draws
        assert np.abs(freq - q).max() < 0.08
        if vocab > 64 and top_p is not None and top_k is None:
            assert support.sum() > 64  # the case really needed the bisection
        np.testing.assert_allclose(
            np.asarray(out.logprobs).reshape(n_dists, draws)[d],
            np.log(q[tokens[d]]),
            atol=2e-5,
        )


def test_temperature_near_zero_is_greedy():
    rng = np.random.default_rng(1)
    logits = jnp.asarray(rng.normal(size=(64, 100)).astype(np.float32))
    keys = sampling.sequence_keys(7, 64)
    cold = _sample(keys, logits, temperature_b=jnp.full((64,), 1e-6))
    greedy = _sample(keys, logits, temperature_b=jnp.zeros((64,)))
    np.testing.assert_array_equal(cold.tokens, jnp.argmax(logits, -1))
    np.testing.assert_array_equal(greedy.tokens, jnp.argmax(logits, -1))
    np.testing.assert_allclose(cold.raw_logprobs, greedy.raw_logprobs)


def test_rows_do_not_depend_on_neighbours():
    rng = np.random.default_rng(2)
    logits = jnp.asarray(rng.normal(size=(8, 50)).astype(np.float32))
    keys = sampling.sequence_keys(3, 8)
    full = _sample(keys, logits, temperature_b=jnp.ones((8,)), top_p_b=jnp.full((8,), 0.9))
    for b in (0, 5):
        alone = _sample(
            keys[b : b + 1],
            logits[b : b + 1],
            temperature_b=jnp.ones((1,)),
            top_p_b=jnp.full((1,), 0.9),
        )
        assert int(alone.tokens[0]) == int(full.tokens[b])


def test_sequence_keys():
    keys = sampling.sequence_keys(5, 3)
    expected = jax.random.fold_in(jax.random.key(5), 2)
    np.testing.assert_array_equal(jax.random.key_data(keys[2]), jax.random.key_data(expected))
    per_row = sampling.sequence_keys([11, 12], 2)
    np.testing.assert_array_equal(
        jax.random.key_data(per_row[1]), jax.random.key_data(jax.random.key(12))
    )
    with pytest.raises(ValueError, match="entries"):
        sampling.sequence_keys([1, 2, 3], 2)
    steps = sampling.step_keys(keys, 4)
    np.testing.assert_array_equal(
        jax.random.key_data(steps[1]), jax.random.key_data(jax.random.fold_in(keys[1], 4))
    )


def test_sampling_logprobs_matches_sample_tokens():
    rng = np.random.default_rng(3)
    logits = jnp.asarray(rng.normal(size=(2, 3, 40)).astype(np.float32))
    temperature = jnp.array([0.8, 1.5])
    top_p = jnp.array([0.7, 0.95])
    table = sampling.sampling_logprobs(logits, temperature_b=temperature, top_k=10, top_p_b=top_p)
    for t in range(3):
        out = _sample(
            sampling.sequence_keys(t, 2),
            logits[:, t],
            temperature_b=temperature,
            top_k=10,
            top_p_b=top_p,
        )
        expected = jnp.take_along_axis(table[:, t], out.tokens[:, None], axis=-1)[:, 0]
        np.testing.assert_allclose(out.logprobs, expected, atol=1e-6)


def test_two_level_categorical_matches_softmax():
    # 1000 tokens over 4 blocks of 256 (the last one partial); a few heavy tokens in different
    # blocks and a light tail. 40,000 draws: every token's frequency within 5 sigma of softmax.
    vocab, draws = 1000, 40_000
    logits = np.full(vocab, -2.0, np.float32)
    logits[[3, 300, 700, 999]] = [2.0, 1.0, 2.5, 0.5]
    logits[510:512] = -np.inf  # filtered tokens are never drawn
    keys = sampling.sequence_keys(99, draws)
    tokens, log_z = jax.jit(sampling.categorical)(keys, jnp.broadcast_to(logits, (draws, vocab)))
    p = np.exp(logits - np.log(np.sum(np.exp(logits.astype(np.float64)))))
    np.testing.assert_allclose(
        log_z[0], np.log(np.sum(np.exp(logits.astype(np.float64)))), rtol=1e-6
    )
    freq = np.bincount(np.asarray(tokens), minlength=vocab) / draws
    sigma = np.sqrt(p * (1 - p) / draws) + 1e-4
    assert np.all(np.abs(freq - p) < 5 * sigma)
    assert freq[510] == 0 and freq[511] == 0
