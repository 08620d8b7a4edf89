"""Mixed precision: parameters stored in `ModelConfig.param_dtype`, programs computing in `dtype`.

With `dtype="bfloat16"` and `param_dtype="float32"` a model holds a float32 master copy of its
weights (and so its optimizer holds float32 Adam moments); every program that runs the model
casts the floating weights of each `Transformer` in it to bfloat16 as it starts:

    model = merge_for_compute(graphdef, params)      # inside a jitted function
    loss = loss_fn(model, batch)                     # bfloat16 matmuls

Inside a train step the cast is part of the differentiated function, so the gradient of the
float32 master weights is the bfloat16 program's gradient, upcast: updates far below a bfloat16
weight's rounding step (an AdamW step of about the learning rate, 1e-6 against a step of 1.2e-4
for a weight of 0.02) accumulate in float32 instead of rounding away. Frozen copies (the
reference policy, a LoRA base, the rollout's decode copy) need no master and are kept in the
compute dtype with `compute_params`.

Only weights under a `Transformer` whose stored dtype is its `param_dtype` are cast: a scalar
head's float32 weights (`ScalarHeadModel`) stay float32, as do weights already in the compute
dtype. With `param_dtype` unset (or equal to `dtype`) nothing is cast and programs are exactly
those of a model without this module. See "Mixed Precision Training" (arXiv:1710.03740) for the
master-copy scheme.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrl_llm.models.config import ModelConfig
from jaxrl_llm.models.transformer import Transformer


def _value(leaf):
    return leaf.get_value() if isinstance(leaf, nnx.Variable) else leaf


def _with_value(leaf, value):
    return leaf.replace(value) if isinstance(leaf, nnx.Variable) else value


def _cast(x, dtype):
    if isinstance(x, jax.ShapeDtypeStruct):  # abstract (planner) parameters
        return jax.ShapeDtypeStruct(x.shape, dtype, sharding=x.sharding)
    return x.astype(dtype)


def mixed_precision_configs(model: nnx.Module) -> list[tuple[tuple, ModelConfig]]:
    """(path, config) of every `Transformer` in `model` whose parameters are stored wider than
    it computes (`ModelConfig.mixed_precision`): what `compute_params` casts."""
    return [
        (path, module.config)
        for path, module in nnx.iter_modules(model)
        if isinstance(module, Transformer) and module.config.mixed_precision
    ]


def compute_params(model: nnx.Module, params: Any) -> Any:
    """`params` of `model` with every mixed-precision `Transformer`'s master weights cast to
    its compute dtype; any other leaf is returned as it is (the same array).

    Args:
      model: the module `params` belongs to (concrete or abstract; only its structure is read).
      params: an `nnx.State` of `model` (or of part of it, e.g. the adapters or the frozen base
        of a LoRA model), with paths from `model`'s root; arrays, tracers or
        `jax.ShapeDtypeStruct`s.

    Returns:
      A state of the same structure; `params` itself when nothing is cast.

    Example:
      >>> model = init_model(tiny_config(dtype="bfloat16", param_dtype="float32"))
      >>> decode_copy = compute_params(model, nnx.state(model, nnx.Param))   # bfloat16
    """
    configs = mixed_precision_configs(model)
    if not configs:
        return params
    flat, changed = [], False
    for path, leaf in nnx.to_flat_state(params):
        value = _value(leaf)
        for prefix, config in configs:
            if (
                tuple(path[: len(prefix)]) == tuple(prefix)
                and getattr(value, "dtype", None) == config.jnp_param_dtype
            ):
                leaf, changed = _with_value(leaf, _cast(value, config.jnp_dtype)), True
                break
        flat.append((path, leaf))
    return nnx.from_flat_state(flat) if changed else params


def merge_for_compute(graphdef: nnx.GraphDef, *states: Any) -> nnx.Module:
    """`nnx.merge(graphdef, *states)` with the weights in the compute dtype (`compute_params`).

    Call it inside the jitted function that runs the model, so the cast is part of that program
    (and of its gradient): under mixed precision a train step's gradients reach the float32
    master weights. Without mixed precision it is `nnx.merge` itself.
    """
    model = nnx.merge(graphdef, *states)
    if not mixed_precision_configs(model):
        return model
    return nnx.merge(graphdef, *(compute_params(model, state) for state in states))


def frozen_copy(model: nnx.Module, params: Any) -> Any:
    """A copy of `params` that shares no buffer with them (their owner's train step may donate
    those), in the compute dtype: a frozen copy (a reference policy, a judge's base) needs no
    float32 master. Mixed-precision leaves are cast (a new array), the others copied."""
    cast = compute_params(model, params)
    return jax.tree.map(lambda c, p: jnp.copy(c) if c is p else c, cast, params)
