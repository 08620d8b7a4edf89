"""Compiling for TPU topologies needs libtpu (the optional `tpu` extra). `scripts/test.sh`
installs it and sets JAXRL_REQUIRE_TPU=1, so there a missing libtpu fails instead of skipping."""

import importlib.util
import os

import pytest


@pytest.fixture(scope="session")
def v5e_2x2():
    """The 4 devices of a v5e 2x2 slice, from libtpu (no TPU attached)."""
    if importlib.util.find_spec("libtpu") is None:
        message = 'libtpu is not installed: pip install "jaxrl_llm[tpu]"'
        if os.environ.get("JAXRL_REQUIRE_TPU") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from jaxrl_llm.scale import get_topology

    return get_topology("v5e-4")
