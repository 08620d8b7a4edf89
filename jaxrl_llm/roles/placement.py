"""Placement: which devices and which mesh each role runs on, from `config.placement`.

    colocated   one set of devices for every role (HybridFlow's hybrid engine): the actor trains
                in the train layout (`TRAIN_RULES`, FSDP x TP) and the rollout decodes from the
                same weights resharded to the decode layout (`DECODE_RULES`, TP) on the same
                devices; on the same mesh, or on a mesh of its own shape over those devices
                when `rollout_mesh` has as many devices as `train_mesh` and another shape
                (e.g. train (16, 4), decode (8, 8): HybridFlow's different TP per phase).
    split       the train mesh on the first devices (actor, reference, critic), the rollout mesh
                on the next ones (LlamaRL / OpenRLHF style); weights move between the groups
                device to device (`jaxrl_llm.sharding.reshard`), never through the host.

Both meshes have the axes ("data", "model"). The main job runs colocated on one device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import ml_collections
from jax.sharding import Mesh

from jaxrl_llm.sharding import make_mesh

MESH_AXES = ("data", "model")
MODES = ("colocated", "split")


class Placement(NamedTuple):
    """The meshes of a run.

    Attributes:
      mode: "colocated" or "split".
      train_mesh: the mesh of the actor, the reference and the critic.
      rollout_mesh: the mesh of the rollout (the same object as `train_mesh` when colocated).
    """

    mode: str
    train_mesh: Mesh
    rollout_mesh: Mesh

    @property
    def colocated(self) -> bool:
        """Whether the rollout shares the train mesh."""
        return self.mode == "colocated"


def placement_section() -> ml_collections.ConfigDict:
    """The default `config.placement`: every role colocated on one device."""
    c = ml_collections.ConfigDict()
    # "colocated": every role on one mesh; the rollout reads the actor's weights resharded
    # from the train layout (FSDP x TP rules) to the decode layout (TP rules) each step.
    # "split": the rollout gets its own devices; weights move there device to device.
    c.mode = "colocated"
    # ("data", "model") sizes of the train mesh (actor, reference, critic), on the first
    # data * model devices.
    c.train_mesh = (1, 1)
    # ("data", "model") sizes of the rollout mesh: in split mode on the next devices; colocated,
    # a decode mesh of its own shape over the train mesh's devices when it has as many devices
    # (e.g. train (16, 4), rollout (8, 8)), else the train mesh itself.
    c.rollout_mesh = (1, 1)
    return c


def _shape(value, field: str) -> tuple[int, int]:
    shape = tuple(value)
    if len(shape) != 2 or any(not isinstance(s, int) or s < 1 for s in shape):
        raise ValueError(
            f"config.placement.{field}={value!r} must be two positive ints, the sizes of the "
            f"{MESH_AXES} mesh axes, e.g. (1, 4)."
        )
    return shape


def validate_placement(placement, num_devices: int | None = None) -> None:
    """Raises ValueError naming the bad `config.placement` field and the fix.

    Args:
      placement: the `config.placement` section.
      num_devices: devices available (default: `jax.device_count()`, checked only when given
        or when the meshes could not fit any machine).
    """
    if placement.mode not in MODES:
        raise ValueError(f"config.placement.mode={placement.mode!r} must be one of {MODES}.")
    train = math.prod(_shape(placement.train_mesh, "train_mesh"))
    rollout = math.prod(_shape(placement.rollout_mesh, "rollout_mesh"))
    if num_devices is None:
        return
    needed = train + (rollout if placement.mode == "split" else 0)
    if needed > num_devices:
        raise ValueError(
            f"config.placement ({placement.mode}: train_mesh={tuple(placement.train_mesh)}"
            + (
                f", rollout_mesh={tuple(placement.rollout_mesh)}"
                if placement.mode == "split"
                else ""
            )
            + f") needs {needed} devices, {num_devices} are available. Shrink the meshes, or on "
            "CPU set XLA_FLAGS=--xla_force_host_platform_device_count=N before starting Python."
        )


def make_placement(placement, devices: Sequence[jax.Device] | None = None) -> Placement:
    """The meshes of `config.placement` over `devices` (default: `jax.devices()`).

    Example:
      >>> p = make_placement(ConfigDict(dict(mode="split", train_mesh=(1, 4), rollout_mesh=(1, 4))))
      >>> p.train_mesh.devices.size, p.rollout_mesh.devices.size
      (4, 4)
    """
    devices = list(jax.devices() if devices is None else devices)
    validate_placement(placement, len(devices))
    train_shape = _shape(placement.train_mesh, "train_mesh")
    n_train = math.prod(train_shape)
    train_mesh = make_mesh(train_shape, MESH_AXES, devices=devices[:n_train])
    if placement.mode == "colocated":
        rollout_shape = _shape(placement.rollout_mesh, "rollout_mesh")
        if math.prod(rollout_shape) != n_train or rollout_shape == train_shape:
            return Placement("colocated", train_mesh, train_mesh)
        rollout_mesh = make_mesh(rollout_shape, MESH_AXES, devices=devices[:n_train])
        return Placement("colocated", train_mesh, rollout_mesh)
    rollout_shape = _shape(placement.rollout_mesh, "rollout_mesh")
    n_rollout = math.prod(rollout_shape)
    rollout_mesh = make_mesh(
        rollout_shape, MESH_AXES, devices=devices[n_train : n_train + n_rollout]
    )
    return Placement("split", train_mesh, rollout_mesh)
