"""Building device meshes: the one function every layout goes through."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh


def make_mesh(
    shape: Sequence[int],
    axis_names: Sequence[str],
    *,
    devices: Sequence[jax.Device] | None = None,
) -> Mesh:
    """A mesh of `shape` over exactly the given devices (default: every device of every process).

    The axes are `AxisType.Auto`: shardings are given by `NamedSharding` on jit inputs and outputs
    and XLA propagates them through the model, which carries no sharding annotations of its own
    (`jax.make_mesh` in this JAX version defaults to `Explicit` axes, which would require them).

    Args:
      shape: the size of each mesh axis; one entry may be -1, meaning "all remaining devices".
      axis_names: one unique name per axis, e.g. ("data", "model").
      devices: the devices to lay out, e.g. `jax.devices()[4:]` for a second, disjoint group.
        Their order is kept up to `jax.make_mesh`'s topology-aware arrangement; a shape no
        arrangement fits (8 x 8 on a 4 x 4 x 4 torus) splits a physical axis between two.

    Returns:
      A `jax.sharding.Mesh`; enter it with `jax.set_mesh(mesh)` where code needs a current mesh.

    Raises:
      ValueError: the product of `shape` differs from the number of devices (no silent
        truncation), or names and shape disagree.

    Example:
      >>> train_mesh = make_mesh((2, 4), ("data", "model"))
      >>> rollout_mesh = make_mesh((1, 4), ("data", "model"), devices=jax.devices()[4:])
    """
    shape = tuple(int(s) for s in shape)
    axis_names = tuple(axis_names)
    if len(shape) != len(axis_names):
        raise ValueError(f"make_mesh: {shape=} and {axis_names=} must have the same length.")
    if len(set(axis_names)) != len(axis_names):
        raise ValueError(f"make_mesh: {axis_names=} must be unique.")
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("make_mesh: no devices given.")
    if shape.count(-1) > 1 or any(s == 0 or s < -1 for s in shape):
        raise ValueError(f"make_mesh: {shape=} must hold positive sizes and at most one -1.")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if len(devices) % known:
            raise ValueError(
                f"make_mesh: cannot fill -1 in {shape=}: {len(devices)} devices are not a "
                f"multiple of {known}."
            )
        shape = tuple(len(devices) // known if s == -1 else s for s in shape)
    if math.prod(shape) != len(devices):
        raise ValueError(
            f"make_mesh: {shape=} holds {math.prod(shape)} devices but {len(devices)} were "
            "given or are available; pass devices=jax.devices()[:n] for a sub-mesh, or use -1 "
            "for one axis."
        )
    axis_types = (AxisType.Auto,) * len(shape)
    try:
        return jax.make_mesh(shape, axis_names, axis_types=axis_types, devices=devices)
    except NotImplementedError:
        # A logical axis that is no product of the torus's physical axes (8 x 8 on a TPU
        # 4 x 4 x 4): split a physical axis between two logical ones, as MaxText allows.
        grid = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
        return Mesh(grid, axis_names, axis_types=axis_types)
