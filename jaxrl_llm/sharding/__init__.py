"""Meshes, logical-axis rule sets (train, decode), sharded init and on-device resharding.

Typical use (one mesh, colocated training and rollout, HybridFlow style):

  >>> mesh = make_mesh((2, 4), ("data", "model"))
  >>> model = init_sharded(config, mesh, TRAIN_RULES)              # FSDP x TP
  >>> opt_state = init_optimizer_state(tx, nnx.state(model, nnx.Param))
  >>> ... train ...
  >>> graphdef, state = nnx.split(model)
  >>> state, stats = reshard(state, param_shardings(state, mesh, DECODE_RULES), donate=True)
  >>> ... decode with nnx.merge(graphdef, state) ...
  >>> state, stats = reshard(state, param_shardings(state, mesh, TRAIN_RULES), donate=True)
"""

from jaxrl_llm.sharding.layout import gathered_rules, layout
from jaxrl_llm.sharding.mesh import make_mesh
from jaxrl_llm.sharding.optimizer import init_optimizer_state, optimizer_state_shardings
from jaxrl_llm.sharding.params import (
    cache_shardings,
    init_sharded,
    param_shardings,
    shard_model,
    variable_sharding,
)
from jaxrl_llm.sharding.resharding import (
    MoveRoute,
    ReshardStats,
    device_bytes,
    live_bytes,
    move_route,
    no_host_transfers,
    reshard,
    same_layout,
)
from jaxrl_llm.sharding.rules import (
    DECODE_RULES,
    TRAIN_RULES,
    Rules,
    logical_to_pspec,
    logical_to_sharding,
)

__all__ = [
    "DECODE_RULES",
    "TRAIN_RULES",
    "MoveRoute",
    "ReshardStats",
    "Rules",
    "cache_shardings",
    "device_bytes",
    "gathered_rules",
    "init_optimizer_state",
    "init_sharded",
    "layout",
    "live_bytes",
    "logical_to_pspec",
    "logical_to_sharding",
    "make_mesh",
    "move_route",
    "no_host_transfers",
    "optimizer_state_shardings",
    "param_shardings",
    "reshard",
    "same_layout",
    "shard_model",
    "variable_sharding",
]
