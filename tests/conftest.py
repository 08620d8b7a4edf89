"""Test setup: 8 fake CPU devices, set before jax is imported anywhere.

XLA reads ``XLA_FLAGS`` once, when the backend starts, so this must run before the
first ``import jax`` of the test session; pytest imports conftest.py first.
"""

import atexit
import gc
import os
import shutil
import tempfile

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

from tests.deadline import DEADLINE_VARIABLE, parse_deadline, skip_reason  # noqa: E402
from tests.heavy import is_heavy  # noqa: E402

# Tests compare against float32 references; keep matmuls at full precision on every backend.
jax.config.update("jax_default_matmul_precision", "highest")

# One persistent compilation cache for the session, empty at its start and removed at its end:
# the run tests build the same tiny programs again and again (the learner's step, the decode
# loop, the evaluator) from new jit objects, which jit's in-memory caches do not share, while a
# program's cache key is its HLO. Measured on a 2-core AMD EPYC under load: the six checkpoint
# fault runs took 150 s with it and 293-306 s without. Every program goes in (no minimum
# compile time): tiny programs compile in well under JAX's default 1 s minimum.
_XLA_CACHE = tempfile.mkdtemp(prefix="jaxrl-tests-xla-")
atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _XLA_CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


_DEADLINE_KEY = pytest.StashKey[float | None]()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    """Marks the tests `tests/heavy.py` lists `heavy` (the target `-m heavy` runs)."""
    for item in items:
        if is_heavy(item.nodeid):
            item.add_marker(pytest.mark.heavy)


def pytest_configure(config):
    """Reads the target's time budget (`tests/deadline.py`); a malformed one stops the run."""
    try:
        config.stash[_DEADLINE_KEY] = parse_deadline(os.environ.get(DEADLINE_VARIABLE))
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


def pytest_runtest_setup(item):
    """Skips a test that would start after the target's deadline, saying so."""
    reason = skip_reason(item.config.stash.get(_DEADLINE_KEY, None))
    if reason is not None:
        pytest.skip(f"{item.nodeid} {reason}")  # the id, so the summary lists each test


def pytest_report_header(config):
    return f"jax {jax.__version__}, devices: {jax.device_count()} x {jax.devices()[0].platform}"


def _memory_maps() -> int | None:
    """The number of this process's memory mappings (Linux), or None elsewhere."""
    try:
        with open("/proc/self/maps") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return None


def _map_limit() -> int:
    """The kernel's limit on one process's memory mappings (`vm.max_map_count`)."""
    try:
        with open("/proc/sys/vm/max_map_count") as limit_file:
            return int(limit_file.read())
    except (OSError, ValueError):
        return 65530  # Linux's default


# Compiled programs are dropped after a module once the process holds this share of the limit:
# far enough below it that one more module's compiles (a few thousand mappings at most, measured
# by the counts printed at the end) cannot reach it.
_RELEASE_AT = 0.5
_RELEASES = []  # the mapping counts at which programs were dropped


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs_near_the_map_limit():
    """Drops every compiled program after a test module when the process nears the limit on
    memory mappings, and not before, so later modules reuse what earlier ones compiled.

    XLA:CPU maps each compiled kernel's code into its own pages, and jit caches keep every
    program of the session alive. Over the ~1,000 tests of one process that reached the kernel's
    limit of 65,530 mappings (`vm.max_map_count`) and the next compile segfaulted (reproduced
    at 64,507 mappings, 94% through the suite). Dropping the programs after every module fixed
    that but made each module recompile what it would have shared; counting the mappings keeps
    both the sharing and the guard.
    """
    yield
    maps = _memory_maps()
    if maps is not None and maps > _RELEASE_AT * _map_limit():
        jax.clear_caches()
        gc.collect()
        _RELEASES.append((maps, _memory_maps()))


def pytest_terminal_summary(terminalreporter):
    """Reports the process's memory mappings at the end, against the kernel's limit, and when
    compiled programs were dropped."""
    maps = _memory_maps()
    if maps is None:
        return
    released = ", ".join(f"{before} -> {after}" for before, after in _RELEASES) or "never"
    terminalreporter.write_line(
        f"memory mappings at the end: {maps} (vm.max_map_count {_map_limit()}); compiled "
        f"programs dropped at {_RELEASE_AT:.0%} of it: {released}"
    )


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
