"""Keeping the planned programs: compiled executables saved with the topology they were built for.

A plan is only as good as the programs it measured. `save_executable` writes a compiled
program (`jax.jit(...).lower(...).compile()`, as the planner compiles every phase) with
`jax.experimental.serialize_executable`, beside a JSON record of its topology; a run on the
slice loads exactly that executable with `load_executable`, as MaxText's
`compiled_trainstep_file` does, instead of compiling again. An executable saved for another
topology (chip kind or count) is refused in one line that names both.

    save_executable(compiled, "plan/actor_train", topology="v5e-64", phase="actor_train")
    step = load_executable("plan/actor_train")          # on the v5e-64 slice
    state, metrics = step(state, batch)

Files: `<path>.exe` (the serialized executable), `<path>.trees` (its argument and result
pytree structures, pickled) and `<path>.json` (phase, topology, device kind and count, jax
version).
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Sequence
from typing import Any

import jax
from jax.experimental import serialize_executable

__all__ = [
    "ExecutableMismatchError",
    "compile_for_saving",
    "executable_record",
    "load_executable",
    "save_executable",
]


class ExecutableMismatchError(ValueError):
    """A saved executable was built for other devices than the ones it is loaded on."""


def _device_signature(devices: Sequence[Any]) -> dict[str, Any]:
    devices = list(devices)
    return {
        "device_kind": devices[0].device_kind if devices else "",
        "platform": devices[0].platform if devices else "",
        "num_devices": len(devices),
    }


def compile_for_saving(lowered):
    """`lowered.compile()` with the persistent compilation cache bypassed, for `save_executable`.

    An XLA:CPU executable read back from the persistent cache serializes without its compiled
    kernels: loaded again, it fails at its first run with "Function <fusion> not found". A fresh
    compile serializes whole. The cache setting is restored afterwards.
    """
    from jax.experimental.compilation_cache import compilation_cache

    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        return lowered.compile()
    finally:
        jax.config.update("jax_enable_compilation_cache", enabled)
        compilation_cache.reset_cache()


def save_executable(compiled, path: str, *, topology: str, phase: str) -> dict[str, Any]:
    """Writes `compiled` (a `jax.stages.Compiled`) to `path`.exe/.trees/.json.

    Args:
      compiled: the compiled program (compile it with `compile_for_saving`: one read back from
        the persistent compilation cache may serialize incomplete).
      path: the files' common prefix (its directory is created).
      topology: the slice's name as the planner takes it, e.g. "v5e-64", or "cpu-8".
      phase: which RL phase it is (for the record).

    Returns:
      The JSON record written.
    """
    payload, in_tree, out_tree = serialize_executable.serialize(compiled)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".exe", "wb") as f:
        f.write(payload)
    with open(path + ".trees", "wb") as f:
        pickle.dump((in_tree, out_tree), f)
    record = {
        "phase": phase,
        "topology": topology,
        **_device_signature(_devices_of(compiled)),
        "jax": jax.__version__,
        "bytes": len(payload),
    }
    with open(path + ".json", "w") as f:
        json.dump(record, f, indent=2)
    return record


def _devices_of(compiled) -> list[Any]:
    """The devices a compiled program runs on, in its device assignment's order."""
    shardings = jax.tree.leaves(compiled.input_shardings) + jax.tree.leaves(
        compiled.output_shardings
    )
    for sharding in shardings:
        mesh = getattr(sharding, "mesh", None)  # a NamedSharding: the mesh's order
        if mesh is not None and getattr(mesh, "devices", None) is not None:
            return list(mesh.devices.flat)
    return sorted({d for s in shardings for d in s.device_set}, key=lambda d: d.id)


def executable_record(path: str) -> dict[str, Any]:
    """The JSON record saved beside an executable.

    Raises:
      FileNotFoundError: no executable at `path` (names the three files expected).
    """
    missing = [s for s in (".exe", ".trees", ".json") if not os.path.isfile(path + s)]
    if missing:
        raise FileNotFoundError(
            f"no saved executable at {path!r}: missing {', '.join(path + s for s in missing)} "
            "(python -m jaxrl_llm.plan --out DIR --save_executables writes them)."
        )
    with open(path + ".json") as f:
        return json.load(f)


def load_executable(path: str, devices: Sequence[Any] | None = None):
    """The executable saved at `path`, loaded onto `devices` (default `jax.devices()`).

    Raises:
      ExecutableMismatchError: the executable was built for another device kind or count,
        or another jax version (one line naming both and what to do).
      FileNotFoundError: see `executable_record`.
    """
    record = executable_record(path)
    devices = list(jax.devices() if devices is None else devices)
    here = _device_signature(devices)
    saved = {k: record[k] for k in ("device_kind", "num_devices")}
    if saved["device_kind"] != here["device_kind"] or saved["num_devices"] > here["num_devices"]:
        raise ExecutableMismatchError(
            f"{path}: the {record['phase']} executable was compiled for {record['topology']} "
            f"({saved['num_devices']} x {saved['device_kind']}), and this process has "
            f"{here['num_devices']} x {here['device_kind']}: run it on that slice, or plan again "
            f"with --topology for this one."
        )
    if record["jax"] != jax.__version__:
        raise ExecutableMismatchError(
            f"{path}: saved by jax {record['jax']}, loaded by jax {jax.__version__}: a serialized "
            "executable is only valid for the jax and XLA that built it; plan again."
        )
    with open(path + ".exe", "rb") as f:
        payload = f.read()
    with open(path + ".trees", "rb") as f:
        in_tree, out_tree = pickle.load(f)
    return serialize_executable.deserialize_and_load(
        payload, in_tree, out_tree, execution_devices=devices[: saved["num_devices"]]
    )
