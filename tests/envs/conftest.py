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


@pytest.fixture
def safe_sandbox():
    """Skips a test where no safe isolation (bubblewrap) works, naming what is missing."""
    from jaxrl_llm.envs.sandbox_isolation import isolation

    found = isolation()
    if not found.safe:
        pytest.skip(f"no safe sandbox on this machine: {found.why_not_safe}")


@pytest.fixture(scope="module")
def host_before(sandbox_host_lock):
    """The host's settings, keys, sandbox cgroups and call directories before the first test
    of a hostile module (taken under the lock that keeps the other sandbox modules away)."""
    from tests.envs.sandbox_host import host_state

    return host_state()


@pytest.fixture(params=("bubblewrap+cgroup", "bubblewrap+watchdog"))
def mechanism(request, monkeypatch):
    """Runs the test under each safe mechanism this machine has."""
    from jaxrl_llm.envs import sandbox_isolation

    found = sandbox_isolation.isolation()
    if not found.safe:
        pytest.skip(f"no safe sandbox on this machine: {found.why_not_safe}")
    if request.param == "bubblewrap+cgroup" and found.mode != request.param:
        pytest.skip("cgroups are not writable here: only the watchdog mechanism runs")
    monkeypatch.setattr(sandbox_isolation, "isolation", lambda: found._replace(mode=request.param))
    return request.param
