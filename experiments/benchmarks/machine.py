"""This machine's ceilings, measured in the same run as a benchmark (shared machines are noisy).

read_bandwidth()   bytes/s of a read-only reduction over 1 GiB, on every core (XLA:CPU
                   splits the reduction over its thread pool): what streaming weights or a
                   KV cache can reach. A numpy copy (read + write, one thread) reads low:
                   llama.cpp beat the decode "limit" derived from it.
matmul_rate()      FLOP/s of a float32 2048^3 matmul (numpy/OpenBLAS, every core).
peak_rss_bytes()   this process's peak resident set size so far.
run_for_result()   a benchmark child process's JSON result line (each system in its own process).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from jaxrl_llm.host import cpu_description  # noqa: F401  (re-exported for the benchmarks)


def best_seconds(fn, *args, repeats: int) -> float:
    """Best wall time of `fn(*args)` over `repeats` runs after one warm-up (compile) call.

    Each result is waited for with `jax.block_until_ready` (numpy results pass through).
    """
    import jax

    jax.block_until_ready(fn(*args))
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return best


def read_bandwidth(nbytes: int = 1 << 30, repeats: int = 5) -> float:
    """Bytes per second read by a jitted sum over a float32 buffer of `nbytes` (best of repeats).

    The buffer is far larger than the caches, so every byte comes from memory; the sum is
    split into one slice per core so that XLA:CPU reduces them in parallel.
    """
    import jax
    import jax.numpy as jnp

    cores = os.cpu_count() or 1
    x = jnp.ones((cores, nbytes // 4 // cores), jnp.float32)
    total = jax.jit(lambda x: x.sum(axis=1))
    seconds = best_seconds(total, x, repeats=repeats)
    return x.size * 4 / seconds


def matmul_rate(n: int = 2048, repeats: int = 3) -> float:
    """FLOP/s of a numpy float32 n^3 matmul (best of repeats)."""
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    return 2 * n**3 / best_seconds(np.matmul, a, a, repeats=repeats)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def run_for_result(cmd: list[str], marker: str, label: str) -> dict | None:
    """Runs `cmd`; returns the JSON after its last stdout line starting with `marker` + " ".

    A child that fails or prints no such line returns None, after a line naming `label` with
    its exit code and the end of its stderr.
    """
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    prefix = marker + " "
    lines = [x for x in out.stdout.splitlines() if x.startswith(prefix)]
    if out.returncode != 0 or not lines:
        print(f"# {label} failed (rc {out.returncode}): {out.stderr[-2000:]}", flush=True)
        return None
    return json.loads(lines[-1][len(prefix) :])


def benchmark_header(what: str) -> str:
    """The first line of a benchmark's output: what it measured, the date and this CPU, e.g.
    "# decode; 2026-11-25; AMD EPYC (AVX-512, 2 cores)"."""
    import datetime

    return f"# {what}; {datetime.date.today()}; {cpu_description()}"
