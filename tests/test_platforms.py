"""Quiet on a CPU: with libtpu installed (the `tpu` extra), a CPU program never starts it, and
the planner starts it without its complaints about the absent TPU reaching stderr.

Each case runs in a fresh process without JAX_PLATFORMS (which tests/conftest.py sets), as a
user's program would run. Skipped without libtpu, unless JAXRL_REQUIRE_TPU=1 (scripts/test.sh).
"""

import importlib.util
import os
import subprocess
import sys

import pytest

from jaxrl_llm.platforms import tpu_attached

# What libtpu writes when it starts on a machine without a TPU (libtpu 0.0.x).
LIBTPU_NOISE = ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "libtpu", "InitGoogle")


@pytest.fixture(scope="module")
def libtpu_without_tpu():
    if importlib.util.find_spec("libtpu") is None:
        message = 'libtpu is not installed: pip install "jaxrl_llm[tpu]"'
        if os.environ.get("JAXRL_REQUIRE_TPU") == "1":
            pytest.fail(message)
        pytest.skip(message)
    if tpu_attached():
        pytest.skip("a TPU is attached: libtpu starts here by design")


def _run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    # libtpu keeps a per-host lock (/tmp/libtpu_lockfile): while another process holds it (a
    # run started before this fix, a planner), a second libtpu gives up silently. Allowing
    # several makes a woken libtpu start, and speak, whatever else runs on the machine.
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )


def test_a_cpu_program_does_not_wake_libtpu(libtpu_without_tpu):
    done = _run(
        "import jax, jax.numpy as jnp\n"
        "from jaxrl_llm.models import init_model, tiny_config\n"
        "from jaxrl_llm.training import make_optimizer\n"
        "logits = init_model(tiny_config())(jnp.ones((1, 4), jnp.int32))\n"
        "make_optimizer(learning_rate=1e-3)\n"
        "print(logits.shape, jax.devices()[0].platform, jax.default_backend())\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "4,", "256)", "cpu", "cpu"]
    assert not [word for word in LIBTPU_NOISE if word in done.stderr], done.stderr


def test_the_planner_says_what_libtpu_does_in_one_line(libtpu_without_tpu):
    done = _run(
        "from jaxrl_llm.scale import get_topology, libtpu_status\n"
        "topology = get_topology('v5e-4')\n"
        "print(topology.num_chips)\n"
        "print(libtpu_status())\n"
    )
    assert done.returncode == 0, done.stderr
    assert not [word for word in LIBTPU_NOISE if word in done.stderr], done.stderr
    chips, status = done.stdout.splitlines()
    assert chips == "4"
    assert status.startswith("libtpu ") and "no TPU is used" in status
    assert "held back, JAXRL_LIBTPU_VERBOSE=1 shows them" in status
