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
import pytest  # noqa: E402

# Tests compare against float32 references; keep matmuls at full precision on every backend.
jax.config.update("jax_default_matmul_precision", "highest")


def pytest_report_header(config):
    return f"jax {jax.__version__}, devices: {jax.device_count()} x {jax.devices()[0].platform}"


def _odd_length_reward(prompt, completion, example):
    """A reward the tiny random model earns about half the time, so the updates are not zero."""
    return float(len(completion) % 2)


@pytest.fixture
def text_reward(monkeypatch):
    """Runs built in the test score completions by `_odd_length_reward` (a learning signal for
    tiny random models, which never solve a task)."""
    from jaxrl_llm.rewards import RewardRunner
    from jaxrl_llm.runners import components

    def build(config):
        del config
        return RewardRunner({"task": _odd_length_reward}, timeout_s=None)

    monkeypatch.setattr(components, "build_rewards", build)
