"""Who the Python sandbox's code runs as: uid 65534 ("nobody"), never mapped to host root.

Not root (CI, a workstation): bubblewrap makes the user namespace itself (`--unshare-user`);
uid 65534 inside is the caller's own uid outside, and `--disable-userns` (where the bubblewrap
build has it) stops the code from making another.

Root (these machines, most CI containers): bubblewrap's own namespace would map the sandbox
uid to host uid 0, and the kernel treats host uid 0 as the owner of every root-owned file:
/proc/sys settings, cgroup files. Instead two user namespaces are made once per process:

  outer  maps 0 -> host 0 and 65534 -> host 65534. bubblewrap joins it (`--userns`) and builds
         the sandbox's mounts there as host root, so it can still mount an interpreter under a
         directory only root may enter (pyenv under /root).
  inner  a child of the outer one that maps only 65534 -> host 65534, with every
         `max_*_namespaces` limit at 0. bubblewrap moves the sandbox into it once the mounts
         are built (`--userns2`), checks it can make no user namespace there
         (`--assert-userns-disabled`), keeps CAP_SETUID/CAP_SETGID/CAP_SETPCAP alone, and the
         command starts with `setpriv` (util-linux) dropping to uid/gid 65534, no groups, an
         empty bounding set and no capabilities before it runs Python.

Host uid 0 is not in the inner namespace's map, so nothing there can become it, and files owned
by host root are "other" to the code. Creating the pair costs about 0.1 s once, nothing per call.
Each call running at once gets an inner namespace of its own (`InnerNamespaces`, kept for the
next call), so the code's RLIMIT_NPROC (`task_limit`), which the kernel counts per uid and
user namespace, bounds the tasks (processes and threads) of that call alone; bubblewrap's own
namespace of a non-root caller is per call already.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import threading
from typing import NamedTuple

# The sandbox's uid and gid, inside and (for a root caller) on the host.
SANDBOX_UID = SANDBOX_GID = 65534
_CLONE_NEWUSER = 0x10000000
_NAMESPACE_LIMITS = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time")


class SandboxUser(NamedTuple):
    """How bubblewrap gets the code to uid 65534 without host root.

    Attributes:
      host_uid: the host uid the code runs as (65534 for a root caller, else the caller's).
      userns_fds: (outer, inner) user namespace fds for a root caller, else ().
      setpriv: the `setpriv` executable that drops to uid 65534 (root caller only).
      disable_userns: bubblewrap takes `--disable-userns` (non-root caller).
      error: why a root caller has no namespaces ("" when it does).
      inner: the inner namespaces of a root caller's calls (`InnerNamespaces`), else None.
    """

    host_uid: int
    userns_fds: tuple[int, ...] = ()
    setpriv: str = ""
    disable_userns: bool = False
    error: str = ""
    inner: InnerNamespaces | None = None

    def bwrap_args(self, inner: int | None = None) -> list[str]:
        """bubblewrap's user-namespace and capability options (`inner`: the call's inner
        namespace, from `InnerNamespaces.take`; the first one when None)."""
        if self.userns_fds:
            outer, first = self.userns_fds
            inner = first if inner is None else inner
            caps = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")  # for setpriv, then dropped
            return ["--userns", str(outer), "--userns2", str(inner), "--assert-userns-disabled",
                    "--cap-drop", "ALL", *(arg for cap in caps for arg in ("--cap-add", cap))]  # fmt: skip
        args = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
        return args + (["--disable-userns"] if self.disable_userns else [])

    def task_limit(self, max_processes: int) -> int:
        """The code's RLIMIT_NPROC for `max_processes` tasks: bubblewrap's init counts too in
        bubblewrap's own namespace (same uid), not in a root caller's inner one (host uid 0)."""
        return max_processes if self.userns_fds else max_processes + 1

    def command_prefix(self) -> list[str]:
        """What runs before the command inside: the drop to uid 65534 (root caller)."""
        if not self.userns_fds:
            return []
        return [self.setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}",
                "--clear-groups", "--bounding-set=-all", "--inh-caps=-all",
                "--ambient-caps=-all", "--"]  # fmt: skip

    def describe(self) -> str:
        """One line for the run's log."""
        if self.userns_fds:
            return (f"code as uid {SANDBOX_UID} = host uid {self.host_uid} (a user namespace "
                    "without host root, new namespaces disabled)")  # fmt: skip
        disabled = "new user namespaces disabled" if self.disable_userns else (
            "bubblewrap too old for --disable-userns")  # fmt: skip
        return f"code as uid {SANDBOX_UID} = host uid {self.host_uid} ({disabled})"


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _holder(preexec, pass_fds=()) -> subprocess.Popen:
    """A process that stays in the namespace `preexec` put it in until its stdin closes
    (Popen returns once `preexec` ran and the exec succeeded)."""
    return subprocess.Popen(
        [shutil.which("cat") or "/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, preexec_fn=preexec, pass_fds=pass_fds,
    )  # fmt: skip


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what} failed")


def _outer_namespace() -> int:
    """Makes the outer namespace (module docstring); returns its fd."""
    unshare = ctypes.CDLL(None, use_errno=True).unshare  # looked up here, called after fork
    holder = _holder(lambda: _check(unshare(_CLONE_NEWUSER), "unshare(CLONE_NEWUSER)"))
    try:
        for kind, own in (("uid", SANDBOX_UID), ("gid", SANDBOX_GID)):
            _write(f"/proc/{holder.pid}/{kind}_map", f"0 0 1\n{own} {own} 1\n")
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.stdin.close()
        holder.wait()


def _inner_namespace(outer: int) -> int:
    """Makes one inner namespace below `outer` (module docstring); returns its fd."""
    libc = ctypes.CDLL(None, use_errno=True)
    unshare, setns = libc.unshare, libc.setns

    def enter_inner():
        _check(setns(outer, _CLONE_NEWUSER), "setns(outer)")
        _check(unshare(_CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
        for kind in _NAMESPACE_LIMITS:  # this namespace's own limits, held by its owner
            path = f"/proc/sys/user/max_{kind}_namespaces"
            if os.path.exists(path):
                _write(path, "0")

    holder = _holder(enter_inner, pass_fds=(outer,))
    try:

        def map_inner():  # a map is written from the parent namespace: the outer one
            _check(setns(outer, _CLONE_NEWUSER), "setns(outer)")
            for kind, own in (("uid", SANDBOX_UID), ("gid", SANDBOX_GID)):
                _write(f"/proc/{holder.pid}/{kind}_map", f"{own} {own} 1\n")

        subprocess.run([shutil.which("true") or "/bin/true"], preexec_fn=map_inner,
                       pass_fds=(outer,), check=True)  # fmt: skip
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.stdin.close()
        holder.wait()


class InnerNamespaces:
    """The inner namespaces of a root caller, one per call running at once.

    RLIMIT_NPROC counts the tasks of one uid in one user namespace, so a call that has an inner
    namespace to itself gets its own count: `take()` hands out a free one (making another when
    every one is in use: 65 to 130 ms on a loaded 2-core machine), `give(fd, reuse)` takes it
    back once the call's tree is gone; a tree that was killed (its tasks perhaps not all reaped
    yet) retires its namespace.

    Args:
      outer: the outer namespace's fd.
      first: an inner namespace made with it (the probe's).
    """

    def __init__(self, outer: int, first: int):
        self.outer, self._free, self._lock = outer, [first], threading.Lock()

    def take(self) -> int:
        """A namespace no running call uses (raises OSError where one cannot be made)."""
        with self._lock:
            if self._free:
                return self._free.pop()
        return _inner_namespace(self.outer)

    def give(self, fd: int, *, reuse: bool) -> None:
        """Takes `fd` back: kept for the next call when `reuse`, else closed."""
        if reuse:
            with self._lock:
                self._free.append(fd)
        else:
            os.close(fd)


def _supports(bwrap: str, option: str) -> bool:
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return option.encode() in done.stdout + done.stderr


@functools.cache
def sandbox_user(bwrap: str) -> SandboxUser:
    """How `bwrap` runs the code as uid 65534 on this machine (probed once per process).

    Example:
      >>> sandbox_user(bwrap_binary()).host_uid  # as root
      65534
    """
    if os.geteuid() != 0:
        return SandboxUser(os.geteuid(), disable_userns=_supports(bwrap, "--disable-userns"))
    setpriv = shutil.which("setpriv")
    if setpriv is None or not setpriv.startswith(("/usr/", "/bin/", "/sbin/")):
        return SandboxUser(SANDBOX_UID, error="setpriv (util-linux) is not installed in /usr")
    try:
        outer = _outer_namespace()
        try:
            inner = _inner_namespace(outer)
        except (OSError, subprocess.SubprocessError):
            os.close(outer)
            raise
    except (OSError, subprocess.SubprocessError) as error:
        return SandboxUser(SANDBOX_UID, error=f"cannot make the sandbox's user namespaces: {error}")
    return SandboxUser(SANDBOX_UID, userns_fds=(outer, inner), setpriv=setpriv,
                       inner=InnerNamespaces(outer, inner))  # fmt: skip
