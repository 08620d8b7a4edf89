"""Test setup: 8 fake CPU devices, set before jax is imported anywhere.

XLA reads ``XLA_FLAGS`` once, when the backend starts, so this must run before the
first ``import jax`` of the test session; pytest imports conftest.py first.
"""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

# Tests compare against float32 references; keep matmuls at full precision on every backend.
jax.config.update("jax_default_matmul_precision", "highest")


def pytest_report_header(config):
    return f"jax {jax.__version__}, devices: {jax.device_count()} x {jax.devices()[0].platform}"
