"""TPU topologies without TPUs: the devices a program is compiled for, from a name.

`jax.experimental.topologies.get_topology_desc` asks libtpu (the `tpu` extra, `pip install
"jaxrl_llm[tpu]"`) for the device list of a slice; `jax.jit(...).lower(...).compile()` then
compiles for it on this CPU, and the compiled object answers `memory_analysis()`. This is
MaxText's `train_compile.py` route. Started on a machine without TPUs, libtpu writes errors
about TPU_ACCELERATOR_TYPE and TPU_WORKER_HOSTNAMES to stderr; they are harmless here, so
`get_topology` holds them back (set JAXRL_LIBTPU_VERBOSE=1 to see them; they are shown if the
call fails) and `libtpu_status()` says in one line what libtpu is doing instead. Nothing else
in jaxrl_llm starts libtpu (`jaxrl_llm.platforms`).

Names follow Cloud TPU's accelerator types: v5e-N has N chips; v5p-N has N TensorCores, N / 2
chips (a v5p chip is one JAX device); v6e-N has N chips. JAX's own "v5e:16x16" form is accepted
too.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import NamedTuple

import jax

from jaxrl_llm.scale.chips import Chip, chip

# Cloud TPU accelerator type -> (chip family, physical shape of the slice).
TOPOLOGIES: dict[str, tuple[str, tuple[int, ...]]] = {
    "v5e-4": ("v5e", (2, 2)),
    "v5e-8": ("v5e", (2, 4)),
    "v5e-16": ("v5e", (4, 4)),
    "v5e-32": ("v5e", (4, 8)),
    "v5e-64": ("v5e", (8, 8)),
    "v5e-128": ("v5e", (8, 16)),
    "v5e-256": ("v5e", (16, 16)),
    "v5p-8": ("v5p", (2, 2, 1)),
    "v5p-16": ("v5p", (2, 2, 2)),
    "v5p-64": ("v5p", (2, 4, 4)),
    "v5p-128": ("v5p", (4, 4, 4)),
    "v5p-256": ("v5p", (4, 4, 8)),
    "v5p-512": ("v5p", (4, 8, 8)),
    "v5p-1024": ("v5p", (8, 8, 8)),
    "v5p-2048": ("v5p", (8, 8, 16)),
    "v6e-4": ("v6e", (2, 2)),
    "v6e-16": ("v6e", (4, 4)),
    "v6e-64": ("v6e", (8, 8)),
    "v6e-256": ("v6e", (16, 16)),
}

# JAX's topology names use the device-kind prefixes below ("v5e:4x4").
_JAX_PREFIX = {"v5e": "v5e", "v5p": "v5p", "v6e": "v6e"}
_INSTALL_HINT = (
    'install the optional `tpu` extra: pip install "jaxrl_llm[tpu]" (it brings libtpu; no TPU '
    "is needed to compile)"
)


class Topology(NamedTuple):
    """A TPU slice to compile for.

    Attributes:
      name: the Cloud name ("v5e-256").
      chip: the chip's published ceilings.
      shape: the physical torus shape, e.g. (16, 16).
      devices: the slice's devices, `jax.Device`s of kind `chip.device_kind`.
    """

    name: str
    chip: Chip
    shape: tuple[int, ...]
    devices: tuple

    @property
    def num_chips(self) -> int:
        """Devices (chips) in the slice."""
        return len(self.devices)


def parse_topology_name(name: str) -> tuple[str, str, tuple[int, ...]]:
    """(Cloud name, chip family, physical shape) of "v5e-256" or "v5e:16x16".

    Raises:
      ValueError: an unknown name, listing the known ones.
    """
    key = name.strip().lower()
    if ":" in key:
        family, _, dims = key.partition(":")
        try:
            shape = tuple(int(d) for d in dims.split("x"))
        except ValueError:
            shape = ()
        if family in _JAX_PREFIX and shape and all(d > 0 for d in shape):
            chips = math.prod(shape)
            cores = 2 * chips if family == "v5p" else chips
            return f"{family}-{cores}", family, shape
    elif key in TOPOLOGIES:
        family, shape = TOPOLOGIES[key]
        return key, family, shape
    raise ValueError(
        f"Unknown TPU topology {name!r}: use a Cloud accelerator type ({', '.join(TOPOLOGIES)}) "
        "or JAX's form such as 'v5e:4x4' or 'v5p:4x4x4'."
    )


_HELD_BACK: list[str] = []  # what libtpu wrote to stderr while it started


@contextlib.contextmanager
def _stderr_held_back() -> Iterator[None]:
    """Collects what this process writes to file descriptor 2 (libtpu's C++ logging included)
    into `_HELD_BACK`; if the body raises, writes it out after all, so no error is hidden."""
    if os.environ.get("JAXRL_LIBTPU_VERBOSE") == "1":
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode(errors="replace")
            if failed:
                sys.stderr.write(text)
            elif text.strip():
                _HELD_BACK.append(text)


def libtpu_status() -> str:
    """One line: what libtpu does in this process (the planner prints it under its header)."""
    try:
        version = importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        version = "(not installed)"
    lines = sum(len(text.strip().splitlines()) for text in _HELD_BACK)
    held = (
        f"; its {lines} start-up lines about the absent TPU (TPU_ACCELERATOR_TYPE, "
        "TPU_WORKER_HOSTNAMES) held back, JAXRL_LIBTPU_VERBOSE=1 shows them"
        if lines
        else ""
    )
    return (
        f"libtpu {version} describes the slice and compiles for it on this CPU; no TPU is "
        f"used{held}"
    )


def require_libtpu() -> None:
    """Raises ImportError with the install line when libtpu is not installed."""
    if importlib.util.find_spec("libtpu") is None:
        raise ImportError(f"Compiling for a TPU topology needs libtpu: {_INSTALL_HINT}.")


@functools.lru_cache(maxsize=32)
def get_topology(name: str) -> Topology:
    """The devices of a TPU slice, from libtpu, with no TPU attached.

    Args:
      name: "v5e-256", "v5p-128", "v5e:2x2", ... (see `TOPOLOGIES`).

    Returns:
      A `Topology` whose devices can build a `Mesh` to compile against.

    Raises:
      ValueError: an unknown name.
      ImportError: libtpu is missing (with the install line).

    Example:
      >>> topo = get_topology("v5e-16")
      >>> mesh = make_mesh((4, 4), ("data", "model"), devices=topo.devices)
    """
    cloud_name, family, shape = parse_topology_name(name)
    require_libtpu()
    # libtpu takes a per-host lock file at start; compiling needs no TPU, so several
    # processes (a planner beside a test run, or beside a job on a TPU VM) may hold it at once.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies

    dims = shape + (1,) * (3 - len(shape))
    host_bounds = (min(dims[0], 2), min(dims[1], 2), 1)
    with _stderr_held_back():  # libtpu starts here: its complaints about the absent TPU
        desc = topologies.get_topology_desc(
            topology_name=f"{_JAX_PREFIX[family]}:{'x'.join(str(d) for d in shape)}",
            platform="tpu",
            chip_config_name="default",
            chips_per_host_bounds=host_bounds,
            num_slices=1,
        )
    devices = tuple(desc.devices)
    spec = chip(family)
    if devices and devices[0].device_kind != spec.device_kind:
        raise RuntimeError(
            f"libtpu describes {cloud_name} with devices of kind {devices[0].device_kind!r}, "
            f"the chip table expects {spec.device_kind!r}: update jaxrl_llm/scale/chips.py."
        )
    return Topology(cloud_name, spec, shape, devices)


def device_coords(device: jax.Device) -> tuple[int, ...]:
    """The physical (x, y, z) coordinates of a TPU device (() for devices without them)."""
    coords = getattr(device, "coords", None)
    return tuple(coords) if coords is not None else ()


def dims_spanned(devices) -> int:
    """How many physical torus dimensions a group of devices differs in (0 for one device or
    devices without coordinates)."""
    coords = [device_coords(d) for d in devices]
    if len(coords) < 2 or not coords[0]:
        return 0
    return sum(1 for axis in range(len(coords[0])) if len({c[axis] for c in coords}) > 1)
