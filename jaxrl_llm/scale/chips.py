"""Published ceilings of the accelerators the planner targets, each figure with its source.

A `Chip` is what the roofline (`jaxrl_llm.scale.costs`) divides by: peak dense bf16 FLOP/s, HBM
capacity and bandwidth, and the inter-chip interconnect (ICI). TPU figures are Google's Cloud
TPU pages; a "chip" is one JAX device on every TPU here (v5p's two TensorCores form one device,
"megacore"), so Cloud's v5p-N names N TensorCores = N / 2 chips.

ICI model. `ici_port_bandwidth` is one port's bidirectional bandwidth (the chip's published
bidirectional ICI figure over its ports). A collective over devices that differ in k torus
dimensions runs as bidirectional rings along those dimensions, so each chip moves data on 2k
ports, one direction each: `collective_bandwidth(k) = k * ici_port_bandwidth`. This is the
first-order model of "How to Scale Your Model" (Austin et al., 2025, jax-ml.github.io/
scaling-book, the TPU and collectives chapters); it ignores wrap-around links missing on
sub-pod slices and contention between collectives.
"""

from __future__ import annotations

import dataclasses

GB = 1e9
GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One accelerator's ceilings (all per chip).

    Attributes:
      name: the family name ("v5e", "v5p", ...).
      device_kind: what `jax.Device.device_kind` says for it (checked against a topology).
      peak_flops: dense bfloat16 FLOP/s.
      hbm_bytes: HBM capacity in bytes.
      hbm_bandwidth: HBM bytes/s.
      ici_bandwidth: bidirectional ICI bytes/s of the whole chip (0: no ICI).
      ici_ports: ICI ports per chip.
      torus_dims: dimensions of its interconnect torus (2 for v5e, 3 for v5p).
      step_overhead_s: fixed seconds per executed decoder layer that no roofline term covers
        (kernel launches, loop control); 0 where unmeasured.
      source: where the figures come from.
    """

    name: str
    device_kind: str
    peak_flops: float
    hbm_bytes: float
    hbm_bandwidth: float
    ici_bandwidth: float = 0.0
    ici_ports: int = 1
    torus_dims: int = 0
    step_overhead_s: float = 0.0
    source: str = ""

    @property
    def ici_port_bandwidth(self) -> float:
        """One port's bidirectional bytes/s."""
        return self.ici_bandwidth / max(self.ici_ports, 1)

    def collective_bandwidth(self, dims_spanned: int) -> float:
        """Bytes/s each chip receives in a ring collective spanning `dims_spanned` torus
        dimensions (see the module docstring); at least one dimension."""
        return max(dims_spanned, 1) * self.ici_port_bandwidth

    def replace(self, **changes) -> Chip:
        """A copy with some fields changed, e.g. a smaller `hbm_bytes` for a safety margin."""
        return dataclasses.replace(self, **changes)


CHIPS: dict[str, Chip] = {
    "v5e": Chip(
        name="v5e",
        device_kind="TPU v5 lite",
        peak_flops=197e12,
        hbm_bytes=16 * GIB,
        hbm_bandwidth=819 * GB,
        ici_bandwidth=400 * GB,
        ici_ports=4,
        torus_dims=2,
        source="https://cloud.google.com/tpu/docs/v5e (197 TFLOP/s bf16, 16 GB HBM2 at "
        "819 GB/s, 400 GB/s bidirectional ICI per chip over 4 ports, 2D torus)",
    ),
    "v5p": Chip(
        name="v5p",
        device_kind="TPU v5",
        peak_flops=459e12,
        hbm_bytes=95 * GIB,
        hbm_bandwidth=2765 * GB,
        ici_bandwidth=1200 * GB,
        ici_ports=6,
        torus_dims=3,
        source="https://cloud.google.com/tpu/docs/v5p (459 TFLOP/s bf16, 95 GiB HBM2e at "
        "2765 GB/s, 1200 GB/s bidirectional ICI per chip, 3D torus, 6 ports)",
    ),
    "v6e": Chip(
        name="v6e",
        device_kind="TPU v6 lite",
        peak_flops=918e12,
        hbm_bytes=32 * GIB,
        hbm_bandwidth=1640 * GB,
        ici_bandwidth=800 * GB,
        ici_ports=4,
        torus_dims=2,
        source="https://cloud.google.com/tpu/docs/v6e (918 TFLOP/s bf16, 32 GB HBM at "
        "1640 GB/s, 800 GB/s bidirectional ICI per chip, 2D torus)",
    ),
    "h100": Chip(
        name="h100",
        device_kind="NVIDIA H100 80GB HBM3",
        peak_flops=989e12,
        hbm_bytes=80 * GIB,
        hbm_bandwidth=3350 * GB,
        source="NVIDIA H100 SXM datasheet (989 TFLOP/s dense bf16, 80 GB HBM3 at 3.35 TB/s)",
    ),
    "h200": Chip(
        name="h200",
        device_kind="NVIDIA H200",
        peak_flops=989e12,
        hbm_bytes=141 * GB,
        hbm_bandwidth=4800 * GB,
        # 1.18 ms per decode step over 30 layers at batch 32 (RESULTS.md, 2026-11-24): ~39 us a
        # layer that no byte or FLOP explains (launches and loop control).
        step_overhead_s=39e-6,
        source="NVIDIA H200 SXM datasheet (989 TFLOP/s dense bf16, 141 GB HBM3e at 4.8 TB/s); "
        "step_overhead_s measured in experiments/benchmarks/RESULTS.md",
    ),
}


def chip(name: str) -> Chip:
    """The `Chip` of a family name ("v5e", "v5p", "v6e", "h100", "h200").

    Raises:
      KeyError: an unknown name, listing the known ones.
    """
    key = name.lower()
    if key not in CHIPS:
        raise KeyError(f"Unknown chip {name!r}; known: {', '.join(sorted(CHIPS))}.")
    return CHIPS[key]


def cpu_chip(*, matmul_flops: float, read_bandwidth: float, memory_bytes: float) -> Chip:
    """A `Chip` for this machine's CPU from ceilings measured in the same run (see
    experiments/benchmarks/machine.py): float32 matmul FLOP/s and read bytes/s."""
    return Chip(
        name="cpu",
        device_kind="cpu",
        peak_flops=matmul_flops,
        hbm_bytes=memory_bytes,
        hbm_bandwidth=read_bandwidth,
        source="measured in the same run (numpy float32 matmul; jitted read-only reduction)",
    )
