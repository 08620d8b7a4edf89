"""Fixtures shared by the environment tests."""

import fcntl
import os
import tempfile

import pytest


@pytest.fixture(scope="module")
def sandbox_host_lock():
    """An exclusive lock held for the whole of a module that makes sandbox cgroups on the host.

    The default test run spreads files over pytest-xdist workers. The hostile suite compares the
    host's sandbox cgroups before and after its module, and test_sandbox.py sweeps every stale
    sandbox cgroup of the host: run side by side, each would see (or remove) the other's live
    groups. Modules that take this lock run one at a time, whichever workers they land on.
    """
    path = os.path.join(tempfile.gettempdir(), "jaxrl_llm-tests-sandbox-host.lock")
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
