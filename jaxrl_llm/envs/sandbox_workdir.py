"""The host directory of a Python sandbox call run under an unsafe isolation, and the sweep of
those a killed process left.

The safe mechanisms write nothing on the host: bubblewrap copies the script from a memory file
into the sandbox's own tmpfs. The unsafe fallbacks ("namespaces", "process group") run the code
in a host directory, `make_workdir()`: made by `tempfile.mkdtemp` in the system temporary
directory (mode 0700: only the library's user can read it), named `WORKDIR_PREFIX` + random,
and locked (`flock` on the directory itself) by the process whose call it is, for as long as
the call runs. The kernel drops the lock when that process dies, even by SIGKILL, so
`sweep_stale_workdirs()` (run by each process's first sandbox probe) removes every such
directory of this user whose lock it can take: its owner is gone.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import time

__all__ = ["WORKDIR_PREFIX", "make_workdir", "remove_workdir", "sweep_stale_workdirs"]

# Every call directory's name starts so (tests and the sweep look for it).
WORKDIR_PREFIX = "jaxrl_llm_sandbox_"


def make_workdir() -> tuple[str, int]:
    """A new private call directory, locked: (its path, the descriptor holding the lock)."""
    path = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return path, fd


def _remove_tree(path: str) -> None:
    """Removes a directory tree even where the code took away its own permissions."""
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            try:
                os.chmod(os.path.join(root, name), 0o700)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


def remove_workdir(path: str, lock_fd: int) -> None:
    """Removes a call directory made by `make_workdir`, then drops its lock."""
    try:
        _remove_tree(path)
    finally:
        os.close(lock_fd)


def sweep_stale_workdirs(min_age_s: float = 5.0) -> int:
    """Removes this user's call directories whose owner is gone (their lock is free) and that
    are older than `min_age_s` (a directory is locked right after it is made); returns how many.
    Directories of an older version (never locked) go too."""
    root = tempfile.gettempdir()
    try:
        names = [name for name in os.listdir(root) if name.startswith(WORKDIR_PREFIX)]
    except OSError:
        return 0
    removed = 0
    for name in names:
        path = os.path.join(root, name)
        try:
            info = os.lstat(path)
            if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
                    or time.time() - info.st_mtime < min_age_s):  # fmt: skip
                continue
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # refused while the owner lives
        except OSError:
            os.close(fd)
            continue
        remove_workdir(path, fd)
        removed += not os.path.exists(path)
    return removed
