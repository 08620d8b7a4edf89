"""The kernel backend each JAX platform runs, one table for every op under `kernels/`: the
Pallas TPU (Mosaic) kernel on TPU, the Pallas GPU (Triton) kernel on GPU, XLA elsewhere (CPU)."""

from __future__ import annotations

import jax

__all__ = ["platform_backend"]

_BACKENDS = {"tpu": "pallas_tpu", "gpu": "pallas_gpu", "cuda": "pallas_gpu"}


def platform_backend(platform: str | None = None) -> str:
    """``"pallas_tpu"`` on TPU, ``"pallas_gpu"`` on GPU, ``"xla"`` elsewhere (CPU).

    Args:
      platform: a jax platform name; None means ``jax.default_backend()``.
    """
    return _BACKENDS.get(platform or jax.default_backend(), "xla")
