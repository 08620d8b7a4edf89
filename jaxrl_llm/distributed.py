"""Starting JAX's multi-process runtime, so the same program runs on one host or several.

After `initialize`, `jax.devices()` lists the devices of every process, `make_mesh` lays them all
out, and a jitted step over a global mesh runs as one SPMD program: each process feeds and reads
only its addressable shards (build inputs with `jax.make_array_from_callback` or
`jax.make_array_from_process_local_data`). On CPU the processes exchange collectives through gloo
(TCP); on GPU through NCCL, on TPU through ICI/DCN, chosen by JAX.

Call it first thing in `main`, before any other JAX call: JAX refuses to join a cluster once a
backend exists. On a single process it does nothing, so scripts call it unconditionally.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import jax

logger = logging.getLogger(__name__)

# Environment variables that mean "this process is one of several" (JAX's own, Slurm, Open MPI).
_MULTI_PROCESS_ENV = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
_TASK_COUNT_ENV = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")


def _launched_as_several() -> bool:
    if any(os.environ.get(name) for name in _MULTI_PROCESS_ENV):
        return True
    return any(int(os.environ.get(name, "1") or 1) > 1 for name in _TASK_COUNT_ENV)


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: int | Sequence[int] | None = None,
    cluster_detection_method: str | None = None,
    cpu_collectives: str | None = "gloo",
    num_cpu_devices: int | None = None,
    initialization_timeout: int = 300,
) -> bool:
    """Joins this process to a multi-process JAX run, or does nothing on a single process.

    A run is multi-process when any of `coordinator_address`, `num_processes` > 1, `process_id`
    or `cluster_detection_method` is given, when `JAX_COORDINATOR_ADDRESS` / `JAX_NUM_PROCESSES`
    / `JAX_PROCESS_ID` is set, or when Slurm or Open MPI launched more than one task. Unset
    arguments are then filled by `jax.distributed.initialize`'s cluster detection (Slurm, Open
    MPI, Cloud TPU, Kubernetes; pass `cluster_detection_method="auto"` to ask for detection
    explicitly, e.g. on a TPU pod, or a name such as "mpi4py").

    Args:
      coordinator_address: "host:port" of process 0, reachable by every process.
      num_processes: the number of processes; 1 means single-process (a no-op).
      process_id: this process's index in [0, num_processes).
      local_device_ids: the accelerators this process uses (default: all it sees).
      cluster_detection_method: None, "auto", or a JAX cluster name.
      cpu_collectives: the CPU collectives implementation ("gloo" or "mpi"); None leaves JAX's
        setting. Only the CPU backend reads it.
      num_cpu_devices: CPU devices per process (`jax_num_cpu_devices`), e.g. to test multi-process
        sharding on one machine; None leaves JAX's setting (and `XLA_FLAGS`).
      initialization_timeout: seconds to wait for every process to join.

    Returns:
      True if this process is (now or already) part of a multi-process run, False otherwise.

    Raises:
      RuntimeError: a JAX backend was already started in this process.

    Example:
      >>> # on each of 2 hosts, before any other JAX call:
      >>> initialize("10.0.0.1:1234", num_processes=2, process_id=int(os.environ["RANK"]))
      >>> mesh = make_mesh((jax.process_count(), -1), ("data", "model"))
    """
    if jax.distributed.is_initialized():
        return True
    if num_cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", int(num_cpu_devices))
    multi = (
        coordinator_address is not None
        or (num_processes is not None and num_processes > 1)
        or process_id is not None
        or cluster_detection_method is not None
        or _launched_as_several()
    )
    if num_processes == 1 or not multi:
        logger.debug("distributed.initialize: single process, nothing to do.")
        return False
    if cpu_collectives is not None:
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
        cluster_detection_method=(
            None if cluster_detection_method == "auto" else cluster_detection_method
        ),
        initialization_timeout=initialization_timeout,
    )
    logger.info(
        "distributed.initialize: process %d of %d, %d local / %d global devices",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.device_count(),
    )
    return True
