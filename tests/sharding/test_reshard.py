"""reshard: train <-> decode, across meshes and device groups, on device, within 1.1x memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_llm.models import Transformer, tiny_config
from jaxrl_llm.sharding import (
    DECODE_RULES,
    TRAIN_RULES,
    cache_shardings,
    device_bytes,
    live_bytes,
    make_mesh,
    no_host_transfers,
    param_shardings,
    reshard,
)
from jaxrl_llm.sharding.resharding import _jit_to

# Four layers and a small vocabulary: the largest array (8192 floats) is 5% of the parameters,
# so moving one array at a time must stay within 1.1x. kv_heads=2 replicates on a model axis of 4.
PEAK_CONFIG = tiny_config(vocab_size=128, num_layers=4, num_kv_heads=2)
SMALL_CONFIG = tiny_config(vocab_size=128, num_layers=1, num_kv_heads=2, tie_word_embeddings=False)


def _is_sharding(x):
    return isinstance(x, NamedSharding)


def _random_state(config, mesh, rules, seed=0):
    """A State of Variables with random values, placed straight into `rules`' layout."""
    abstract = nnx.state(nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0))))
    rng = np.random.default_rng(seed)

    def make(sharding, variable):
        value = variable.get_value()
        host = rng.standard_normal(value.shape).astype(value.dtype)
        return variable.replace(jax.device_put(host, sharding))

    return jax.tree.map(make, param_shardings(abstract, mesh, rules), abstract)


def _host(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _assert_layout(tree, shardings):
    expected = jax.tree.leaves(shardings, is_leaf=_is_sharding)
    assert [x.sharding for x in jax.tree.leaves(tree)] == expected


def _assert_same_values(host_before, tree):
    after = _host(tree)
    assert len(after) == len(host_before)
    for a, b in zip(host_before, after, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_train_decode_train_is_bit_identical_in_place_and_within_1_1x_memory():
    mesh = make_mesh((2, 4), ("data", "model"))
    state = _random_state(PEAK_CONFIG, mesh, TRAIN_RULES)
    train = param_shardings(state, mesh, TRAIN_RULES)
    decode = param_shardings(state, mesh, DECODE_RULES)
    values = _host(state)
    param_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    caches = None
    for _ in range(2):  # the second round trip reuses every compiled move
        sources = jax.tree.leaves(state)
        src_device = sum(device_bytes(x) for x in sources)
        dst_device = sum(
            device_bytes(x, s)
            for x, s in zip(sources, jax.tree.leaves(decode, is_leaf=_is_sharding), strict=True)
        )
        # Whatever else this test process holds on the devices is not the reshard's doing.
        logical_now, device_now = live_bytes()
        other_logical, other_device = logical_now - param_bytes, device_now - src_device
        state, stats = reshard(state, decode, donate=True, measure_peak=True)
        _assert_layout(state, decode)
        moved = [x is not y for x, y in zip(sources, jax.tree.leaves(state), strict=True)]
        # Moved sources are deleted; arrays already in place (norm scales) are passed through.
        assert [x.is_deleted() for x in sources] == moved
        assert (
            stats.num_arrays == len(sources) and stats.num_moved == sum(moved) == 4 * 7 + 1
        )  # 7 weights a layer, embed
        assert stats.bytes == sum(x.nbytes for x, m in zip(sources, moved, strict=True) if m)
        assert stats.peak_live_bytes - other_logical <= 1.1 * param_bytes
        assert stats.peak_live_device_bytes - other_device <= 1.1 * max(src_device, dst_device)
        assert stats.seconds > 0
        _assert_same_values(values, state)

        state, stats = reshard(state, train, donate=True, measure_peak=True)
        _assert_layout(state, train)
        assert stats.peak_live_bytes - other_logical <= 1.1 * param_bytes
        assert stats.peak_live_device_bytes - other_device <= 1.1 * max(src_device, dst_device)
        _assert_same_values(values, state)
        sizes = [_jit_to(s)._cache_size() for s in jax.tree.leaves(decode) + jax.tree.leaves(train)]
        assert caches is None or sizes == caches
        caches = sizes


def test_without_donation_the_source_is_untouched():
    mesh = make_mesh((2, 4), ("data", "model"))
    state = _random_state(SMALL_CONFIG, mesh, TRAIN_RULES)
    decode, stats = reshard(state, param_shardings(state, mesh, DECODE_RULES), donate=False)
    assert not any(x.is_deleted() for x in jax.tree.leaves(state))
    _assert_same_values(_host(state), decode)
    # The same tree twice with one sharding for all: a single Sharding is broadcast.
    replicated = NamedSharding(mesh, P())
    both, _ = reshard({"a": state, "b": state}, replicated, donate=False)
    # Norm scales were already replicated (P(None) is equivalent to P()): passed through as is.
    assert all(x.sharding.is_equivalent_to(replicated, x.ndim) for x in jax.tree.leaves(both))
    assert both["a"]["final_norm"]["scale"].get_value() is state["final_norm"]["scale"].get_value()
    _assert_same_values(_host(state), both["b"])


def _group(ids, shape):
    return make_mesh(shape, ("data", "model"), devices=[jax.devices()[i] for i in ids])


@pytest.mark.parametrize(
    "src_ids, src_shape, dst_ids, dst_shape",
    [
        (range(4), (2, 2), range(4, 8), (1, 4)),  # disjoint groups, equal sizes, new shape
        (range(8), (2, 4), range(4, 8), (2, 2)),  # 8 -> 4, overlapping
        (range(4), (2, 2), range(8), (4, 2)),  # 4 -> 8, overlapping
        (range(2), (1, 2), range(2, 8), (2, 3)),  # 2 -> 6 disjoint, sizes not multiples
        (range(8), (2, 4), range(7, -1, -1), (2, 4)),  # same devices, reversed order
    ],
    ids=["0-3to4-7", "8to4", "4to8", "2to6", "reversed"],
)
def test_between_device_groups(src_ids, src_shape, dst_ids, dst_shape):
    src_mesh, dst_mesh = _group(src_ids, src_shape), _group(dst_ids, dst_shape)
    state = _random_state(SMALL_CONFIG, src_mesh, TRAIN_RULES, seed=1)
    values = _host(state)
    sources = jax.tree.leaves(state)
    decode = param_shardings(state, dst_mesh, DECODE_RULES)
    state, stats = reshard(state, decode, donate=True)
    _assert_layout(state, decode)
    assert all(x.is_deleted() for x in sources)
    assert stats.num_moved == len(sources)
    _assert_same_values(values, state)
    # And back into the source group's training layout.
    train = param_shardings(state, src_mesh, TRAIN_RULES)
    state, _ = reshard(state, train, donate=True)
    _assert_layout(state, train)
    _assert_same_values(values, state)


def test_single_device_arrays_and_a_kv_cache_move_on_device():
    mesh = make_mesh((2, 4), ("data", "model"))
    cache_like = jax.ShapeDtypeStruct((4, 4, 8, 16), jnp.float32)  # [B, K, S, H]
    shardings = cache_shardings({"k": cache_like, "v": cache_like}, mesh, DECODE_RULES)
    one_device = {
        "k": jnp.arange(4 * 4 * 8 * 16, dtype=jnp.float32).reshape(4, 4, 8, 16),
        "v": jnp.ones((4, 4, 8, 16)),
    }
    values = _host(one_device)
    cache, _ = reshard(one_device, shardings, donate=True)
    assert cache["k"].sharding.spec == P("data", "model", None, None)
    assert one_device["k"].is_deleted() and one_device["v"].is_deleted()
    _assert_same_values(values, cache)
    other = cache_shardings(cache, _group(range(4, 8), (4, 1)), DECODE_RULES)
    moved, _ = reshard(cache, other, donate=False)
    assert {d.id for d in moved["v"].sharding.device_set} == {4, 5, 6, 7}
    _assert_same_values(values, moved)


def test_a_host_trip_under_the_guard_raises():
    mesh = make_mesh((2, 4), ("data", "model"))
    host = np.arange(64.0, dtype=np.float32).reshape(8, 8)
    x = jax.device_put(host, NamedSharding(mesh, P("data", "model")))
    other = NamedSharding(_group(range(4, 8), (2, 2)), P(None, "model"))
    with no_host_transfers():
        with pytest.raises(Exception, match="Disallowed host-to-device"):
            jax.device_put(host, NamedSharding(mesh, P()))
        with pytest.raises(Exception, match="Disallowed host-to-device"):
            jnp.asarray(host)
        # A round trip through the host (what a careless reshard does) fails at its second leg.
        with pytest.raises(Exception, match="Disallowed host-to-device"):
            jax.device_put(jax.device_get(x), other)
        # Plain device_put between mismatched blocks on other devices gathers through the host.
        with pytest.raises(Exception, match="Disallowed host-to-device"):
            jax.device_put(x, other)
        if jax.default_backend() != "cpu":
            # CPU device memory is host memory: JAX does not check device->host reads there.
            with pytest.raises(Exception, match="Disallowed device-to-host"):
                np.asarray(x)
    # reshard (itself guarded) moves the same array device to device.
    y, stats = reshard(x, other, donate=False)
    assert y.sharding == other and stats.num_moved == 1 and stats.bytes == 64 * 4
    np.testing.assert_array_equal(np.asarray(y), host)


def test_reshard_rejects_host_leaves_and_mismatched_shardings():
    mesh = make_mesh((2, 4), ("data", "model"))
    replicated = NamedSharding(mesh, P())
    with pytest.raises(TypeError, match="moves device arrays"):
        reshard({"a": np.ones(3)}, replicated, donate=False)
    with pytest.raises(ValueError, match="structure"):
        reshard({"a": jnp.ones(3)}, {"b": replicated}, donate=False)
