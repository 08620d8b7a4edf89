"""Sharded initialisation, placing a model, and optimizer state laid out like the parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_llm.models import Transformer, init_model, tiny_config
from jaxrl_llm.sharding import (
    DECODE_RULES,
    TRAIN_RULES,
    init_optimizer_state,
    init_sharded,
    make_mesh,
    no_host_transfers,
    optimizer_state_shardings,
    param_shardings,
    shard_model,
)

# One layer keeps the (compile-bound) random init cheap. F = D = 64: gate_proj [D, F] and
# down_proj [F, D] have one shape but transposed layouts.
CONFIG = tiny_config(num_layers=1, num_kv_heads=4, tie_word_embeddings=False, intermediate_size=64)
SEED = 3


def _is_variable(x):
    return isinstance(x, nnx.Variable)


def _arrays(state):
    return [v.get_value() for v in jax.tree.leaves(state, is_leaf=_is_variable)]


@pytest.fixture(scope="module")
def mesh():
    return make_mesh((2, 4), ("data", "model"))


@pytest.fixture(scope="module")
def sharded_model(mesh):
    # Under the guard: an init on the host followed by a copy to the devices would raise.
    with no_host_transfers():
        return init_sharded(CONFIG, mesh, TRAIN_RULES, seed=SEED)


@pytest.fixture(scope="module")
def eager_model():
    return init_model(CONFIG, seed=SEED)


def test_init_sharded_places_every_parameter_and_matches_the_unsharded_init(
    mesh, sharded_model, eager_model
):
    model = sharded_model
    expected = param_shardings(model, mesh, TRAIN_RULES)
    got = jax.tree.map(lambda v: v.get_value().sharding, nnx.state(model), is_leaf=_is_variable)
    assert got == expected
    assert model.lm_head.get_value().sharding.spec == P("data", "model")
    # Same values as the jitted single-device init, bit for bit; eager init is within an ulp.
    jitted = jax.jit(lambda: nnx.state(Transformer(CONFIG, rngs=nnx.Rngs(params=SEED))))()
    eager = nnx.state(eager_model)
    for a, b, c in zip(_arrays(nnx.state(model)), _arrays(jitted), _arrays(eager), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=2e-7, atol=1e-8)
    assert float(jnp.std(model.layers[0].mlp.up_proj.get_value())) == pytest.approx(0.02, rel=0.05)


def test_shard_model_places_an_eager_model_and_keeps_values(mesh, eager_model):
    graphdef, state = nnx.split(eager_model)
    model = nnx.merge(graphdef, jax.tree.map(jnp.copy, state))  # ours to donate
    sources = _arrays(nnx.state(model))
    placed = shard_model(model, mesh, DECODE_RULES, donate=True)
    assert placed.layers[0].attention.q_proj.get_value().sharding.spec == P(None, "model", None)
    assert placed.embed.get_value().sharding == NamedSharding(mesh, P("model", None))
    assert placed.lm_head.get_value().sharding == NamedSharding(mesh, P(None, "model"))
    assert all(x.is_deleted() for x in sources)
    for a, b in zip(_arrays(state), _arrays(nnx.state(placed)), strict=True):
        assert not b.is_deleted()
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("as_arrays", [False, True], ids=["variables", "raw-arrays"])
def test_adamw_state_is_sharded_like_the_parameters(mesh, sharded_model, as_arrays):
    params = nnx.state(sharded_model, nnx.Param)
    shardings = param_shardings(params, mesh, TRAIN_RULES)
    if as_arrays:
        params = jax.tree.map(lambda v: v.get_value(), params, is_leaf=_is_variable)
    tx = optax.adamw(1e-3, weight_decay=0.1)
    opt_state = init_optimizer_state(tx, params)
    adam = opt_state[0]
    param_specs = [x.sharding for x in jax.tree.leaves(params)]
    assert [x.sharding for x in jax.tree.leaves(adam.mu)] == param_specs
    assert [x.sharding for x in jax.tree.leaves(adam.nu)] == param_specs
    assert adam.count.sharding == NamedSharding(mesh, P())
    assert all(float(jnp.abs(x).max()) == 0.0 for x in jax.tree.leaves(adam.mu))
    # Explicit shardings (the State from param_shardings, a prefix of a Variables tree) agree.
    explicit = optimizer_state_shardings(tx, params, shardings)
    got = jax.tree.leaves(explicit, is_leaf=lambda s: isinstance(s, NamedSharding))
    assert got == [x.sharding for x in jax.tree.leaves(opt_state)]
    # Parameters of equal shape and different layouts keep their own (matched by tree, not shape).
    mlp_mu = adam.mu["layers"][0]["mlp"]
    leaf = (lambda x: x) if as_arrays else (lambda v: v.get_value())
    assert leaf(mlp_mu["gate_proj"]).sharding.spec == P("data", "model")
    assert leaf(mlp_mu["down_proj"]).sharding.spec == P("model", "data")
