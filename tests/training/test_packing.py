"""Sequence packing: the plan, pack/unpack, and the invariant that a packed row gives every
sequence the log-probs of its own unpacked row."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.training import sequence_logprobs
from jaxrl_llm.training.packing import pack, plan_packing, unpack


def _check_plan(plan, lengths, width):
    taken = np.zeros((plan.num_rows, width), bool)
    for b, n in enumerate(lengths):
        r, o = plan.row[b], plan.offset[b]
        assert 0 <= o and o + n <= width
        assert not taken[r, o : o + n].any(), "two sequences overlap"
        taken[r, o : o + n] = True
        np.testing.assert_array_equal(plan.segment_ids[r, o : o + n], b + 1)
        np.testing.assert_array_equal(plan.positions[r, o : o + n], np.arange(n))
    assert (plan.segment_ids[~taken] == 0).all()


def test_first_fit_decreasing_fills_rows():
    lengths = [3, 7, 5, 2, 4, 1]
    plan = plan_packing(lengths, width=8)
    _check_plan(plan, lengths, 8)
    # FFD: 7 -> row 0, 5 -> row 1, 4 -> row 2, 3 -> row 1 (5+3), 2 -> row 2, 1 -> row 0.
    assert plan.num_rows == 3
    np.testing.assert_array_equal(plan.row, [1, 0, 1, 2, 2, 0])


def test_row_count_is_rounded_up_and_random_plans_are_valid():
    rng = np.random.default_rng(0)
    for _ in range(50):
        width = int(rng.integers(4, 40))
        lengths = rng.integers(1, width + 1, size=int(rng.integers(1, 30)))
        plan = plan_packing(lengths, width=width, row_multiple=4)
        _check_plan(plan, lengths, width)
        assert plan.num_rows % 4 == 0
        assert plan.num_rows <= 4 * -(-len(lengths) // 4)  # never more rows than unpacked
        # A lower bound: the tokens need at least this many rows.
        assert plan.num_rows >= -(-int(lengths.sum()) // width)


def test_pack_unpack_round_trip_and_per_sequence_broadcast():
    lengths = np.array([2, 5, 3])
    x = np.arange(3 * 6).reshape(3, 6) + 1
    plan = plan_packing(lengths, width=6)
    packed = pack(x, plan, fill=-1)
    assert packed.shape == (plan.num_rows, 6)
    back = unpack(packed, plan, fill=0)
    for b, n in enumerate(lengths):
        np.testing.assert_array_equal(back[b, :n], x[b, :n])
        assert (back[b, n:] == 0).all()
    per_seq = pack(np.array([10.0, 20.0, 30.0]), plan)
    for b, n in enumerate(lengths):
        np.testing.assert_array_equal(
            per_seq[plan.row[b], plan.offset[b] : plan.offset[b] + n], (b + 1) * 10.0
        )


@pytest.mark.parametrize(
    "lengths, width, error",
    [([], 4, "non-empty"), ([0, 2], 4, r"\[1, width=4\]"), ([5], 4, r"\[1, width=4\]")],
)
def test_bad_lengths_are_named(lengths, width, error):
    with pytest.raises(ValueError, match=error):
        plan_packing(lengths, width=width)


@pytest.mark.parametrize("remat", [False, True])
def test_packed_logprobs_equal_unpacked(remat):
    model = init_model(tiny_config(tie_word_embeddings=False), seed=0)
    rng = np.random.default_rng(1)
    width = 16
    lengths = np.array([9, 4, 16, 3, 7, 5])
    tokens = rng.integers(1, 256, size=(len(lengths), width)).astype(np.int32)
    for b, n in enumerate(lengths):
        tokens[b, n:] = 0
    plan = plan_packing(lengths, width=width)
    assert plan.num_rows < len(lengths)
    unpacked, unpacked_ent = sequence_logprobs(
        model, jnp.asarray(tokens), return_entropy=True, remat=remat
    )
    packed, packed_ent = sequence_logprobs(
        model,
        jnp.asarray(pack(tokens, plan)),
        return_entropy=True,
        remat=remat,
        positions_bt=jnp.asarray(plan.positions),
        segment_ids_bt=jnp.asarray(plan.segment_ids),
    )
    back = unpack(np.asarray(packed), plan)
    back_ent = unpack(np.asarray(packed_ent), plan)
    for b, n in enumerate(lengths):
        # Column 0 of each sequence has no prefix: in a packed row it reads the previous
        # sequence (masked in training); every later column must match.
        np.testing.assert_allclose(back[b, 1:n], np.asarray(unpacked)[b, 1:n], atol=1e-5)
        np.testing.assert_allclose(back_ent[b, 1:n], np.asarray(unpacked_ent)[b, 1:n], atol=1e-5)


def test_segment_ids_need_a_cache_free_forward():
    model = init_model(tiny_config(), seed=0)
    tokens = jnp.zeros((1, 4), jnp.int32)
    with pytest.raises(ValueError, match="cache-free"):
        model.hidden_states(
            tokens, segment_ids_bt=jnp.ones((1, 4), jnp.int32), kv_cache=model.init_cache(1, 4)
        )
    with pytest.raises(ValueError, match="segment_ids_bt"):
        model.hidden_states(tokens, segment_ids_bt=jnp.ones((1, 3), jnp.int32))
