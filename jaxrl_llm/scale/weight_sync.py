"""The weight sync of an RL step (train layout -> decode layout), lowered as a run executes it.

Each step `RolloutWorker.sync` (`jaxrl_llm.roles.rollout`) casts a mixed-precision actor's
float32 master weights to the compute dtype, then `reshard` moves the arrays one at a time, each
by its `MoveRoute` (`jaxrl_llm.sharding.resharding`). The programs of those steps:

  reshard_cast     the cast (mixed precision only), train layout, on the learner's chips
  reshard          the same devices in the same order: the jitted identity to the decode layout
  reshard_send     other devices, or the same ones in another order (a 16x4 train mesh and an
                   8x8 decode mesh of one v5e-64 order its chips differently): the jitted
                   identity to the transport layout on the learner's chips (none for an array
                   already laid out so)
  reshard_receive  from the transport layout to the decode layout on the decode mesh's chips
                   (none where the transport layout is the decode layout)

and between the last two `jax.device_put` copies whole blocks device to device, which is no
program (`SyncPrograms.copy_bytes`). With LoRA only the adapters move each step (the base is
laid out once); the "merge" rollout's merge program is not among these. Programs of one shape,
dtype and pair of layouts are lowered once; `Program.runs` counts the arrays that share one.
`jaxrl_llm.scale.sync_phases` turns their compiled reports into a plan's phases.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from jaxrl_llm.models.lora import split_adapters
from jaxrl_llm.models.precision import compute_params
from jaxrl_llm.scale.programs import Program, abstract_policy, program_key
from jaxrl_llm.scale.workload import Workload
from jaxrl_llm.sharding import (
    DECODE_RULES,
    TRAIN_RULES,
    move_route,
    param_shardings,
    same_layout,
)


class SyncPrograms(NamedTuple):
    """The weight sync of one step, as lowered programs and the bytes copied device to device.

    Attributes:
      programs: one per distinct step of the module docstring's list.
      copy_bytes: bytes each decode-mesh chip receives by `jax.device_put`, device to device
        (0 when every array moves on the same devices in the same order).
      decode_bytes: bytes per decode-mesh chip of the moved arrays in the decode layout.
      held_bytes: bytes per decode-mesh chip the rollout holds before the sync (with LoRA,
        the base in the decode layout; else 0: the decode copy is dropped between steps).
    """

    programs: list[Program]
    copy_bytes: float
    decode_bytes: float
    held_bytes: float


def _leaves(tree) -> list:
    return jax.tree.leaves(
        tree, is_leaf=lambda x: isinstance(x, (nnx.Variable, NamedSharding, jax.ShapeDtypeStruct))
    )


def _values(tree) -> list[jax.ShapeDtypeStruct]:
    return [x.get_value() if isinstance(x, nnx.Variable) else x for x in _leaves(tree)]


def _shard_bytes(shape, dtype, sharding) -> float:
    return float(np.prod(sharding.shard_shape(tuple(shape)))) * np.dtype(dtype).itemsize


def reshard_programs(workload: Workload, train_mesh: Mesh, rollout_mesh: Mesh) -> SyncPrograms:
    """What `RolloutWorker.sync` runs to lay the actor's weights (train layout on `train_mesh`)
    out in the decode layout on `rollout_mesh` (see the module docstring)."""
    policy = abstract_policy(workload)
    master = nnx.state(policy, nnx.Param)
    cast = compute_params(policy, master)
    src = param_shardings(master, train_mesh, TRAIN_RULES)
    dst = param_shardings(cast, rollout_mesh, DECODE_RULES)
    held = 0.0
    if workload.lora:  # the base is laid out at the first sync; each step moves the adapters
        held = sum(
            _shard_bytes(x.shape, x.dtype, d)
            for x, d in zip(_values(split_adapters(cast)[1]), _leaves(split_adapters(dst)[1]),
                            strict=True)
        )  # fmt: skip
        master, cast, src, dst = (split_adapters(t)[0] for t in (master, cast, src, dst))
    steps: dict[tuple, list] = {}  # key -> [phase, mesh, function, argument, out sharding, runs]

    def add(phase, mesh, function, x, out):
        key = (phase, x.shape, str(x.dtype), repr(x.sharding), repr(out))
        steps.setdefault(key, [phase, mesh, function, x, out, 0])[-1] += 1

    copy_bytes = decode_bytes = 0.0
    for m, c, s, d in zip(_values(master), _values(cast), _leaves(src), _leaves(dst), strict=True):
        x = jax.ShapeDtypeStruct(c.shape, c.dtype, sharding=s)
        if c.dtype != m.dtype:
            master_x = jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=s)
            add("reshard_cast", train_mesh, lambda a, t=c.dtype: a.astype(t), master_x, s)
        if same_layout(x, d):
            continue  # `reshard` returns it as it is
        decode_bytes += _shard_bytes(c.shape, c.dtype, d)
        route = move_route(x, d)
        if route.before is not None:
            phase = "reshard" if route.copy is None else "reshard_send"
            add(phase, train_mesh, lambda a: a, x, route.before)
        if route.copy is not None:
            copy_bytes += _shard_bytes(c.shape, c.dtype, route.copy)
        if route.after is not None:
            block = jax.ShapeDtypeStruct(c.shape, c.dtype, sharding=route.copy)
            add("reshard_receive", rollout_mesh, lambda a: a, block, route.after)
    to = tuple(dd.id for dd in rollout_mesh.devices.flat)
    programs = []
    for phase, mesh, function, x, out, runs in steps.values():
        lowered = jax.jit(function, out_shardings=out).lower(x)
        key = program_key(workload, phase, mesh, shape=x.shape, dtype=str(x.dtype),
                          src=repr(x.sharding), dst=repr(out), to=to)  # fmt: skip
        programs.append(Program(phase, lowered, mesh, runs, key))
    return SyncPrograms(programs, copy_bytes, decode_bytes, held)
