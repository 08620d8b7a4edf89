"""Meshes, rule sets and the shardings they give, on 8 fake CPU devices."""

import inspect

import jax
import pytest
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxrl_llm.sharding as sharding
from jaxrl_llm.models import KV_CACHE_LOGICAL_AXES, Transformer, tiny_config
from jaxrl_llm.sharding import (
    DECODE_RULES,
    TRAIN_RULES,
    cache_shardings,
    logical_to_pspec,
    make_mesh,
    param_shardings,
)


def _is_variable(x):
    return isinstance(x, nnx.Variable)


def test_public_names_have_docstrings():
    for name in sharding.__all__:
        obj = getattr(sharding, name)
        if callable(obj) and not isinstance(obj, tuple):
            assert inspect.getdoc(obj), name
    # The rule sets are data: the module docs describe them.
    assert "TRAIN_RULES" in inspect.getsource(sharding.rules)
    assert sharding.__doc__ and sharding.rules.__doc__


def test_make_mesh_shapes_devices_and_axis_types():
    mesh = make_mesh((2, 4), ("data", "model"))
    assert dict(mesh.shape) == {"data": 2, "model": 4}
    assert [d.id for d in mesh.devices.flat] == list(range(8))
    assert mesh.axis_types == (AxisType.Auto, AxisType.Auto)
    sub = make_mesh((-1, 2), ("data", "model"), devices=jax.devices()[4:])
    assert dict(sub.shape) == {"data": 2, "model": 2}
    assert {d.id for d in sub.devices.flat} == {4, 5, 6, 7}


@pytest.mark.parametrize(
    "shape, devices, match",
    [
        ((2, 2), None, "holds 4 devices but 8"),
        ((4, 4), None, "holds 16 devices but 8"),
        ((2, 4), jax.devices()[:4], "holds 8 devices but 4"),
        ((-1, 3), None, "cannot fill -1"),
        ((2,), None, "same length"),
    ],
)
def test_make_mesh_rejects_a_device_count_mismatch(shape, devices, match):
    with pytest.raises(ValueError, match=match):
        make_mesh(shape, ("data", "model"), devices=devices)


def test_logical_to_pspec_exact_specs_without_a_mesh():
    assert logical_to_pspec(("embed", "heads", "head_dim"), TRAIN_RULES) == P("data", "model", None)
    assert logical_to_pspec(("heads", "head_dim", "embed"), TRAIN_RULES) == P("model", None, "data")
    assert logical_to_pspec(("vocab", "embed"), TRAIN_RULES) == P("model", "data")
    assert logical_to_pspec(("embed", "mlp"), DECODE_RULES) == P(None, "model")
    assert logical_to_pspec(("norm",), TRAIN_RULES) == P(None)
    assert logical_to_pspec(KV_CACHE_LOGICAL_AXES, DECODE_RULES) == P("data", "model", None, None)
    assert logical_to_pspec((None, "mlp"), TRAIN_RULES) == P(None, "model")


@pytest.mark.parametrize(
    "mesh_shape, shards_heads", [((4, 2), False), ((2, 4), False), ((1, 3), True)]
)
def test_fallback_to_replication_smollm2_heads(mesh_shape, shards_heads):
    """SmolLM2-135M: 9 heads, 3 KV heads, D=576, F=1536, V=49152, H=64."""
    devices = jax.devices()[: mesh_shape[0] * mesh_shape[1]]
    mesh = make_mesh(mesh_shape, ("data", "model"), devices=devices)
    q = logical_to_pspec(("embed", "heads", "head_dim"), DECODE_RULES, mesh, (576, 9, 64))
    k = logical_to_pspec(("embed", "kv_heads", "head_dim"), DECODE_RULES, mesh, (576, 3, 64))
    heads = "model" if shards_heads else None
    assert q == P(None, heads, None)
    assert k == P(None, heads, None)
    assert logical_to_pspec(("embed", "mlp"), DECODE_RULES, mesh, (576, 1536)) == P(None, "model")
    assert logical_to_pspec(("vocab", "embed"), DECODE_RULES, mesh, (49152, 576)) == P(
        "model", None
    )


def test_train_rules_shard_embed_when_heads_replicate():
    mesh = make_mesh((2, 4), ("data", "model"))
    # The model axis does not divide 9 heads; FSDP over "data" still splits D=576.
    assert logical_to_pspec(("embed", "heads", "head_dim"), TRAIN_RULES, mesh, (576, 9, 64)) == P(
        "data", None, None
    )


def test_missing_mesh_axis_used_axis_tuples_and_candidates():
    mesh = make_mesh((8,), ("model",))
    # No "data" axis: the train set degrades to pure tensor parallelism.
    assert logical_to_pspec(("embed", "mlp"), TRAIN_RULES, mesh, (64, 128)) == P(None, "model")
    rules = (("a", ("data", "model")), ("a", "data"), ("b", "data"), ("c", None))
    mesh = make_mesh((2, 4), ("data", "model"))
    assert logical_to_pspec(("a",), rules, mesh, (16,)) == P(("data", "model"))
    assert logical_to_pspec(("a",), rules, mesh, (6,)) == P("data")  # 8 does not divide 6
    assert logical_to_pspec(("a",), rules, mesh, (3,)) == P(None)
    # A mesh axis shards one dimension only: "b" cannot reuse "data".
    assert logical_to_pspec(("a", "b"), rules, mesh, (6, 4)) == P("data", None)
    assert logical_to_pspec(("c", "b"), rules, mesh, (3, 4)) == P(None, "data")
    with pytest.raises(KeyError, match="'oops' has no rule"):
        logical_to_pspec(("oops",), rules)
    with pytest.raises(ValueError, match="rank"):
        logical_to_pspec(("a", "b"), rules, mesh, (4,))


@pytest.mark.parametrize("rules", [TRAIN_RULES, DECODE_RULES], ids=["train", "decode"])
def test_param_shardings_follow_the_rules(rules):
    config = tiny_config(num_heads=4, num_kv_heads=2)  # kv_heads=2 cannot split 4 ways
    mesh = make_mesh((2, 4), ("data", "model"))
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    shardings = param_shardings(abstract, mesh, rules)
    state = nnx.state(abstract)
    pairs = zip(
        jax.tree.leaves(state, is_leaf=_is_variable),
        jax.tree.leaves(shardings, is_leaf=lambda s: isinstance(s, NamedSharding)),
        strict=True,
    )
    for variable, got in pairs:
        axes = variable.get_metadata()["logical_axes"]
        want = logical_to_pspec(axes, rules, mesh, variable.get_value().shape)
        assert got == NamedSharding(mesh, want)
    layer = shardings["layers"][0]
    fsdp = "data" if rules is TRAIN_RULES else None
    assert shardings["embed"].spec == P("model", fsdp)
    assert layer["attention"]["q_proj"].spec == P(fsdp, "model", None)
    assert layer["attention"]["k_proj"].spec == P(fsdp, None, None)
    assert layer["attention"]["o_proj"].spec == P("model", None, fsdp)
    assert layer["mlp"]["down_proj"].spec == P("model", fsdp)
    assert layer["input_norm"]["scale"].spec == P(None)


def test_cache_shardings():
    config = tiny_config(num_kv_heads=4)
    mesh = make_mesh((2, 4), ("data", "model"))
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    abstract = jax.eval_shape(lambda: model.init_cache(4, 16))
    shardings = cache_shardings(abstract, mesh, DECODE_RULES)
    specs = {s.spec for s in jax.tree.leaves(shardings)}
    assert specs == {P("data", "model", None, None)}
    assert len(jax.tree.leaves(shardings)) == 2 * config.num_layers
    cache = jax.jit(lambda: model.init_cache(4, 16), out_shardings=shardings)()
    assert cache.layers[1].values.sharding == NamedSharding(mesh, P("data", "model", None, None))
    with pytest.raises(ValueError, match=r"\[B, K, S, H\]"):
        cache_shardings(jax.ShapeDtypeStruct((4, 16), "float32"), mesh, DECODE_RULES)
