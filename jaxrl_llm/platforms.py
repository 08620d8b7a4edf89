"""Which JAX platforms a process wakes: libtpu only where a TPU is attached (or when planning).

With the `tpu` extra installed (libtpu, which `python -m jaxrl_llm.plan` needs to compile for a
TPU topology from a CPU), JAX's first `jax.devices()` tries every backend it knows, TPU
included, whether or not a TPU is attached: libtpu then starts, fails, and prints its
initialisation errors ("could not determine TPU accelerator type", "unexpected worker hostname
...") on every CPU program. `skip_absent_tpu`, called when `jaxrl_llm` is imported, leaves the
TPU backend out on a machine with no TPU chip on its PCI bus, before any backend starts. Nothing
changes where the user chose the platforms (`JAX_PLATFORMS` or `jax_platforms`), where a TPU is
attached, where libtpu is absent, or where a GPU is visible (JAX picks there as it would).

The planner (`jaxrl_llm.scale.topology`) reaches libtpu on its own: it asks for a topology's
devices, which needs no TPU backend.
"""

from __future__ import annotations

import glob
import importlib.util
import os

# PCI vendor id of Google; TPU chips are the Google devices whose ids JAX's
# `hardware_utils._TPU_PCI_DEVICE_IDS` lists (v2 ... v6e).
_GOOGLE_VENDOR = "0x1ae0"
# Devices that mean an accelerator other than a TPU is there (JAX's own checks: NVIDIA's
# device files, and ROCm's kernel driver).
_GPU_FILES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def tpu_attached() -> bool:
    """Whether a TPU chip is on this machine's PCI bus (JAX's own test, where it can be read)."""
    try:
        from jax._src import hardware_utils  # where jax's cloud_tpu_init looks

        return hardware_utils.num_available_tpu_chips_and_device_id()[0] > 0
    except (ImportError, AttributeError):  # a jax without it: any Google PCI device counts
        for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
            try:
                with open(vendor) as f:
                    if f.read().strip() == _GOOGLE_VENDOR:
                        return True
            except OSError:
                continue
        return False


def skip_absent_tpu() -> bool:
    """Leaves JAX's TPU backend out of this process when libtpu is installed but no TPU is
    attached (and no GPU visible, and the platforms were not chosen): `jax_platforms="cpu"`.

    Must run before the first backend starts (`jaxrl_llm/__init__.py` calls it); afterwards it
    changes nothing. Returns whether it set the platforms.
    """
    if os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_FORCE_TPU_INIT"):
        return False
    if importlib.util.find_spec("libtpu") is None:  # nothing to wake
        return False
    if any(os.path.exists(path) for path in _GPU_FILES) or tpu_attached():
        return False
    import jax

    if jax.config.jax_platforms:  # chosen in code before jaxrl_llm was imported
        return False
    try:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():  # too late: every backend has started
            return False
    except (ImportError, AttributeError):
        pass
    jax.config.update("jax_platforms", "cpu")
    return True
