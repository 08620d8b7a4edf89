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

import argparse
import logging
import os
import socket
import subprocess
import sys
import time
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
    shutdown_timeout: int = 3600,
) -> bool:
    """Joins this process to a multi-process JAX run, or does nothing on a single process.

    A run is multi-process when any of `coordinator_address`, `num_processes` > 1, `process_id`
    or `cluster_detection_method` is given, when `JAX_COORDINATOR_ADDRESS` / `JAX_NUM_PROCESSES`
    / `JAX_PROCESS_ID` is set, or when Slurm or Open MPI launched more than one task. Unset
    arguments are then read from `JAX_NUM_PROCESSES` / `JAX_PROCESS_ID` (JAX itself reads
    `JAX_COORDINATOR_ADDRESS`) or filled by `jax.distributed.initialize`'s cluster detection (Slurm, Open
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
      shutdown_timeout: seconds a finished process waits at exit for the others (e.g. a
        generator process for the learner's last evaluation).

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
    if num_processes is None and os.environ.get("JAX_NUM_PROCESSES"):
        num_processes = int(os.environ["JAX_NUM_PROCESSES"])
    if process_id is None and os.environ.get("JAX_PROCESS_ID"):
        process_id = int(os.environ["JAX_PROCESS_ID"])
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
        shutdown_timeout_seconds=shutdown_timeout,
    )
    logger.info(
        "distributed.initialize: process %d of %d, %d local / %d global devices",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.device_count(),
    )
    return True


def free_port() -> int:
    """A TCP port free on this machine now (for a local coordinator)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_local(
    command: Sequence[str],
    num_processes: int,
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    grace_s: float = 60.0,
) -> int:
    """Runs `command` as `num_processes` processes of one `jax.distributed` run on this machine.

    Each process gets `JAX_COORDINATOR_ADDRESS` (127.0.0.1:`port`), `JAX_NUM_PROCESSES` and its
    `JAX_PROCESS_ID`, which `initialize()` reads. When one process fails, the others get
    `grace_s` seconds to notice and stop on their own, then are terminated.

    Returns:
      0 if every process succeeded, else the first non-zero exit code.

    Example:
      >>> launch_local([sys.executable, "-m", "jaxrl_llm.main", "--config", "c.py",
      ...               "--workdir", "runs/two", "--config.async_rl.processes=2"], 2)
    """
    port = free_port() if port is None else port
    base = dict(os.environ if env is None else env)
    base.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(num_processes))
    procs = [
        subprocess.Popen(list(command), env={**base, "JAX_PROCESS_ID": str(i)})
        for i in range(num_processes)
    ]
    failed_at = None
    while any(p.poll() is None for p in procs):
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace_s:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        time.sleep(0.2)
    codes = [p.returncode for p in procs]
    return next((c for c in codes if c != 0), 0)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jaxrl_llm.distributed",
        description="Run a command as N local processes of one jax.distributed run.",
    )
    parser.add_argument("--num_processes", type=int, default=2)
    parser.add_argument("--port", type=int, default=None, help="coordinator port (default: free)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.num_processes < 1:
        parser.error("give --num_processes >= 1 and a command after --")
    return launch_local(command, args.num_processes, port=args.port)


if __name__ == "__main__":
    sys.exit(_main())
