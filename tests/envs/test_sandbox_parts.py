"""The Python sandbox's parts, checked without running model code: output escaping, the host
call directories of the unsafe modes and their sweep, a root caller's inner user namespaces.
"""

import os
import stat
import tempfile

import pytest

from jaxrl_llm.envs import sandbox
from jaxrl_llm.envs.sandbox_output import decode_output, escape_controls
from jaxrl_llm.envs.sandbox_workdir import (
    WORKDIR_PREFIX,
    make_workdir,
    remove_workdir,
    sweep_stale_workdirs,
)

# Makes and sweeps call directories in the system temporary directory: never beside the other
# sandbox modules, which compare those (conftest.py).
pytestmark = pytest.mark.usefixtures("sandbox_host_lock")


def test_control_characters_are_escaped_and_tabs_and_newlines_kept():
    assert escape_controls("ok\tline\n") == "ok\tline\n"
    assert escape_controls("\x1b[31mred\x00\r\x07\x7f\x9b\x85é") == (
        "\\x1b[31mred\\x00\\x0d\\x07\\x7f\\x9b\\x85é")  # fmt: skip
    # cut after escaping: the kept text never passes max_chars
    assert decode_output(b"\x1b\x1b\x1b", 10, keep_tail=False) == ("\\x1b\\x1b\\x", True)
    assert decode_output(b"ab\x00", 4, keep_tail=True) == ("\\x00", True)
    assert decode_output(b"\xff\x1b", 10, keep_tail=False) == ("\ufffd\\x1b", False)


def test_call_directories_are_private_and_swept_once_their_owner_is_gone():
    """0700 and locked while the call runs; a directory whose lock is free (its process died:
    the kernel drops the lock as `close` does here) is removed by the next sweep, a young one
    (locked right after mkdtemp) and a locked one are not."""
    live, live_lock = make_workdir()
    orphan, orphan_lock = make_workdir()
    young, young_lock = make_workdir()
    try:
        assert os.path.basename(live).startswith(WORKDIR_PREFIX)
        assert os.path.dirname(live) == tempfile.gettempdir()
        assert stat.S_IMODE(os.stat(live).st_mode) == 0o700
        for path in (live, orphan):
            os.utime(path, (0, 0))  # made long ago
        os.close(orphan_lock)
        os.close(young_lock)
        sweep_stale_workdirs(min_age_s=60.0)
        assert not os.path.exists(orphan)
        assert os.path.isdir(live) and os.path.isdir(young)
    finally:
        remove_workdir(live, live_lock)
        remove_workdir(young, os.open("/", os.O_RDONLY))  # its lock was dropped above
    assert not os.path.exists(live) and not os.path.exists(young)


def test_each_running_call_of_a_root_caller_gets_its_own_inner_namespace():
    """RLIMIT_NPROC counts per uid and user namespace: two calls at once must not share one;
    a namespace comes back for reuse, or is retired after a kill (closed)."""
    found = sandbox.isolation()
    if not found.safe or found.user.inner is None:
        pytest.skip("not a root caller with a safe sandbox: bubblewrap's namespace is per call")
    pool = found.user.inner
    first, second = pool.take(), pool.take()
    assert first != second
    assert os.readlink(f"/proc/self/fd/{first}") != os.readlink(f"/proc/self/fd/{second}")
    pool.give(second, reuse=True)
    assert pool.take() == second
    pool.give(second, reuse=False)
    with pytest.raises(OSError):
        os.fstat(second)
    pool.give(first, reuse=True)


def test_a_launch_passes_only_the_outer_and_its_own_inner_namespace():
    """A killed call retires (closes) its inner namespace, the probe's first one included; a
    later launch must not pass that number on (it may be free, or another descriptor now).

    Earlier tests in the same process may have retired the probe's namespace already, so the
    one retired here is the probe's when it is still in the pool, else another free one."""
    from jaxrl_llm.envs.sandbox_isolation import bwrap_launch

    found = sandbox.isolation()
    if not found.safe or found.user.inner is None:
        pytest.skip("not a root caller with a safe sandbox: bubblewrap's namespace is per call")
    outer, first = found.user.userns_fds
    pool = found.user.inner
    taken = [pool.take() for _ in range(len(pool._free) + 1)]  # every free one and a new one
    retired = first if first in taken else taken[0]
    for fd in taken:
        pool.give(fd, reuse=fd != retired)  # as after a killed call
    launch = bwrap_launch(found, ["true"], network=False, tmpfs_bytes=1 << 20)
    try:
        assert launch.pass_fds == (outer, launch.inner, *launch.own_fds)
        assert launch.inner in taken and launch.inner != retired
    finally:
        launch.close()
        launch.release(killed=False)


def test_no_fork_hook_of_filelock_closes_what_the_sandbox_passes():
    """filelock 4.x registers fork hooks that, in a child forked with a preexec_fn (every
    sandbox start), close the descriptors a stale lock record matches: the namespace descriptors
    passed to bubblewrap then failed with EBADF in a full test run. pyproject.toml keeps
    filelock below 4, which has no fork hooks."""
    import filelock

    assert int(filelock.__version__.split(".")[0]) < 4, filelock.__version__
