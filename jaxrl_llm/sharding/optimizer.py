"""Optimizer state laid out like the parameters it tracks.

Every copy of the parameter tree inside an optax state (AdamW's `mu` and `nu`, SGD momentum ...)
gets exactly the parameters' shardings, found with `optax.tree_utils.tree_map_params` (which asks
the transformation itself where its parameter-shaped fields are, so two parameters of equal shape
can never swap shardings); everything else (step counts, schedules' state) is replicated.
"""

from __future__ import annotations

from typing import Any

import jax
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec, Sharding


def _is_variable(x) -> bool:
    return isinstance(x, nnx.Variable)


def _leaf_shardings(params: Any) -> Any:
    def one(x):
        return (x.get_value() if _is_variable(x) else x).sharding

    return jax.tree.map(one, params, is_leaf=_is_variable)


def optimizer_state_shardings(
    tx: optax.GradientTransformation, params: Any, param_shardings: Any = None
) -> Any:
    """The sharding of every leaf of `tx.init(params)`.

    Args:
      tx: the optax transformation.
      params: what `tx.init` receives: a State of Variables, a dict of arrays, or their abstract
        (`jax.ShapeDtypeStruct`) versions.
      param_shardings: the parameters' shardings, with the structure of `params` or a prefix of
        it (the State from `param_shardings`); default: the `.sharding` of concrete `params`.

    Returns:
      The structure of `jax.eval_shape(tx.init, params)` with a NamedSharding in place of each
      array (or each Variable: a tree prefix, usable as jit `out_shardings`): the parameters'
      shardings for parameter-like fields, replicated for the rest.

    Example:
      >>> tx = optax.adamw(1e-4)
      >>> params = nnx.state(model, nnx.Param)
      >>> opt_state = jax.jit(tx.init, out_shardings=optimizer_state_shardings(tx, params))(params)
    """
    if param_shardings is None:
        param_shardings = _leaf_shardings(params)
    mesh_leaves = jax.tree.leaves(param_shardings, is_leaf=lambda s: isinstance(s, Sharding))
    if not mesh_leaves or not isinstance(mesh_leaves[0], NamedSharding):
        raise ValueError("optimizer_state_shardings needs NamedSharding parameter shardings.")
    replicated = NamedSharding(mesh_leaves[0].mesh, PartitionSpec())
    abstract_state = jax.eval_shape(tx.init, params)
    return optax.tree_utils.tree_map_params(
        tx,
        lambda _, sharding: sharding,
        abstract_state,
        param_shardings,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda x: _is_variable(x) or isinstance(x, Sharding),
    )


def init_optimizer_state(
    tx: optax.GradientTransformation, params: Any, param_shardings: Any = None
) -> Any:
    """`tx.init(params)` computed under jit straight into the parameters' shardings.

    Args:
      tx: the optax transformation.
      params: concrete parameters (a State of Variables or a tree of arrays), already placed.
      param_shardings: optional, as in `optimizer_state_shardings`.

    Returns:
      The optimizer state; its parameter-like fields are sharded exactly like `params`.
    """
    shardings = optimizer_state_shardings(tx, params, param_shardings)
    return jax.jit(tx.init, out_shardings=shardings)(params)
