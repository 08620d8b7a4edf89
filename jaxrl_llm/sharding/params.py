"""Shardings of a model's parameters and KV cache; placing and initialising a sharded model.

`param_shardings` reads the `logical_axes` metadata of every `nnx.Variable` and resolves it with
a rule set (`jaxrl_llm.sharding.rules`). Its result is an `nnx.State` with the paths of
`nnx.state(model)` whose leaves are `NamedSharding` objects (not wrapped in Variables). That one
tree works as `jax.jit` in/out shardings and as `reshard` destination both for a State of
Variables (the shardings are a tree prefix of it) and for the same State with raw arrays.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_llm.models import KV_CACHE_LOGICAL_AXES, ModelConfig, Transformer
from jaxrl_llm.sharding.resharding import reshard
from jaxrl_llm.sharding.rules import Rules, logical_to_pspec


def _is_variable(x) -> bool:
    return isinstance(x, nnx.Variable)


def variable_sharding(variable: nnx.Variable, mesh: Mesh, rules: Rules) -> NamedSharding:
    """The NamedSharding of one Variable from its `logical_axes` metadata (replicated if none)."""
    logical_axes = variable.get_metadata().get("logical_axes")
    value = variable.get_value()
    if logical_axes is None:
        return NamedSharding(mesh, PartitionSpec())
    return NamedSharding(mesh, logical_to_pspec(logical_axes, rules, mesh, value.shape))


def param_shardings(model_or_state: nnx.Module | nnx.State, mesh: Mesh, rules: Rules) -> nnx.State:
    """The NamedSharding of every variable of a model under a rule set.

    Args:
      model_or_state: an `nnx.Module` (concrete or from `nnx.eval_shape`) or a State of Variables
        (`nnx.state(model)`, `nnx.split(model)[1]`, `nnx.state(model, nnx.Param)`). Variables need
        `logical_axes` metadata to shard; those without it are replicated.
      mesh: the mesh to place on.
      rules: `TRAIN_RULES`, `DECODE_RULES` or a custom rule set.

    Returns:
      An `nnx.State` with the same paths whose leaves are `NamedSharding` (not Variables).

    Example:
      >>> shardings = param_shardings(model, mesh, TRAIN_RULES)
      >>> shardings["layers"][0]["attention"]["q_proj"].spec
      P('data', 'model', None)
    """
    if isinstance(model_or_state, nnx.Module):
        state = nnx.state(model_or_state)
    elif isinstance(model_or_state, nnx.State):
        state = model_or_state
    else:
        raise TypeError(
            "param_shardings needs an nnx.Module or a State of nnx.Variables (the logical axes "
            f"live in Variable metadata); got {type(model_or_state).__name__}."
        )
    return jax.tree.map(lambda v: variable_sharding(v, mesh, rules), state, is_leaf=_is_variable)


def shard_model(model: nnx.Module, mesh: Mesh, rules: Rules, *, donate: bool = False):
    """A copy of `model` with its variables placed by `rules` on `mesh` (via `reshard`).

    With `donate=True` the input model's arrays are deleted as they move (it becomes unusable);
    use it to place a freshly loaded checkpoint without holding it twice.

    Example:
      >>> model, tokenizer = from_pretrained("smollm2-135m-instruct")
      >>> model = shard_model(model, make_mesh((2, 4), ("data", "model")), DECODE_RULES, donate=True)
    """
    graphdef, state = nnx.split(model)
    state, _ = reshard(state, param_shardings(state, mesh, rules), donate=donate)
    return nnx.merge(graphdef, state)


def init_sharded(config: ModelConfig, mesh: Mesh, rules: Rules, *, seed: int = 0) -> Transformer:
    """A randomly initialised `Transformer` created directly in its sharded layout.

    The model is first built abstractly (`nnx.eval_shape`, no memory) to read its shapes and
    logical axes; the initialiser then runs under `jax.jit` with those `out_shardings`, so each
    device computes only its own shards: nothing is built on the host or on one device and copied.
    Values equal a jitted `init_model(config, seed)` bit for bit (eager init may differ by an ulp,
    as XLA fuses the scaling of the normal draws).

    Example:
      >>> model = init_sharded(tiny_config(), make_mesh((2, 4), ("data", "model")), TRAIN_RULES)
    """

    def build() -> Transformer:
        return Transformer(config, rngs=nnx.Rngs(params=seed))

    graphdef, abstract_state = nnx.split(nnx.eval_shape(build))
    shardings = param_shardings(abstract_state, mesh, rules)
    state = jax.jit(lambda: nnx.split(build())[1], out_shardings=shardings)()
    return nnx.merge(graphdef, state)


def cache_shardings(cache: Any, mesh: Mesh, rules: Rules) -> Any:
    """NamedSharding for every array [B, K, S, H] of a `KVCache` (concrete or abstract).

    Uses `KV_CACHE_LOGICAL_AXES` = ("cache_batch", "kv_heads", "cache_sequence", "head_dim").

    Example:
      >>> abstract = jax.eval_shape(lambda: model.init_cache(8, 256))
      >>> cache = jax.jit(lambda: model.init_cache(8, 256),
      ...                 out_shardings=cache_shardings(abstract, mesh, DECODE_RULES))()
    """

    def one(x) -> NamedSharding:
        if len(x.shape) != len(KV_CACHE_LOGICAL_AXES):
            raise ValueError(
                f"cache_shardings: a cache array must be [B, K, S, H]; got shape {x.shape}."
            )
        return NamedSharding(mesh, logical_to_pspec(KV_CACHE_LOGICAL_AXES, rules, mesh, x.shape))

    return jax.tree.map(one, cache)
