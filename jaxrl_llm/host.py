"""The machine a run or benchmark ran on: CPU model, widest vector ISA, cores, and the
accelerator when JAX computes on one.

Figures from different CPUs are not comparable (the same decode was 1.04x llama.cpp on an
AVX-512 Xeon and 0.49x on an AVX2 EPYC), so every run records `host_info()` in its
`summary.json` and every benchmark prints `cpu_description()` in its header.
"""

from __future__ import annotations

import os
import platform

__all__ = ["accelerator_info", "cpu_description", "host_info"]


def host_info() -> dict[str, object]:
    """This machine's CPU as a dict: {"cpu": model name, "isa": widest vector ISA, "cores": n}.

    Example:
      >>> host_info()
      {'cpu': 'AMD EPYC', 'isa': 'AVX-512', 'cores': 2}
    """
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not model:
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    model = model or platform.processor() or "unknown CPU"
    if "amx_tile" in flags:
        isa = "AMX"
    elif "avx512f" in flags:
        isa = "AVX-512"
    elif "avx2" in flags:
        isa = "AVX2"
    else:
        isa = "no AVX2"
    return {"cpu": model, "isa": isa, "cores": os.cpu_count()}


def accelerator_info() -> dict[str, str]:
    """{"accelerator": "1 x NVIDIA H100 80GB HBM3"} when JAX computes on an accelerator, {} on a
    CPU: a run on a GPU records its chip beside the host's CPU (`summary.json`'s "host")."""
    import jax

    if jax.default_backend() == "cpu":
        return {}
    devices = jax.devices()
    return {"accelerator": f"{len(devices)} x {devices[0].device_kind}"}


def cpu_description() -> str:
    """`host_info()` as one phrase, e.g. "AMD EPYC (AVX-512, 2 cores)"."""
    info = host_info()
    return f"{info['cpu']} ({info['isa']}, {info['cores']} cores)"
