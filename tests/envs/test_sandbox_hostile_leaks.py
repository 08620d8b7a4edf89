"""Hostile model code against the Python sandbox, the classes of a red-team pass as root after
tests/envs/test_sandbox_hostile.py's held: socket families a network namespace does
not cut (AF_VSOCK), threads and kernel buffers the watchdog did not count, the code left on the
host by a killed library process, host paths shown inside, inotify on the shared read-only
trees, control bytes in the output. Each runs under every mechanism this machine has; after the
module the host's settings, keys, sandbox cgroups and call directories are compared with a
snapshot taken before it (the last test).
"""

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest

import jaxrl_llm
from jaxrl_llm.envs import sandbox_isolation
from jaxrl_llm.envs.sandbox import python_sandbox_tool, run_python
from jaxrl_llm.envs.sandbox_isolation import isolation as detected_isolation
from jaxrl_llm.envs.sandbox_limits import sweep_stale_groups
from jaxrl_llm.envs.sandbox_seccomp import syscall_number
from jaxrl_llm.envs.sandbox_workdir import WORKDIR_PREFIX
from jaxrl_llm.envs.tools import ToolStatus, call_tool
from tests.envs.sandbox_host import MECHANISMS, assert_host_unchanged, sandbox_cgroups

pytestmark = pytest.mark.usefixtures("safe_sandbox", "host_before")

# ctypes calls printing "<name> <errno name>", or "<name> ok" where the call went through.
_CALLS = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def call(name, result):
    print(name, "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()])
"""


def _outcomes(result) -> dict[str, str]:
    assert result.status == "ok", result
    return dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())


def _pid_running(argv: list[str]) -> int | None:
    """The pid of a live process whose command line is exactly `argv`."""
    wanted = ("\0".join(argv) + "\0").encode()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read() == wanted:
                    return int(entry)
        except OSError:
            continue
    return None


def _wait_for(argv: list[str], *, present: bool, timeout_s: float) -> int | None:
    """Polls until a process `argv` is running (`present`) or gone; its pid or None."""
    deadline = time.monotonic() + timeout_s
    pid = _pid_running(argv)
    while (pid is None) == present and time.monotonic() < deadline:
        time.sleep(0.05)
        pid = _pid_running(argv)
    return pid


def test_only_four_socket_families(mechanism):
    """socket/socketpair of AF_VSOCK (which a network namespace does not cut: the host's vsock
    port space and the hypervisor), AF_PACKET, AF_ALG and the rest fail with EAFNOSUPPORT;
    AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK work."""
    families = {"unix": 1, "inet": 2, "inet6": 10, "netlink": 16, "vsock": 40, "packet": 17,
                "alg": 38, "key": 15, "rds": 21, "can": 29, "tipc": 30, "bluetooth": 31,
                "xdp": 44}  # fmt: skip
    code = (
        _CALLS
        + f"for name, family in {families!r}.items():\n"
        + (
            "    kind = 3 if family == 16 else 1  # netlink: SOCK_RAW, the others SOCK_STREAM\n"
            "    call(name, libc.socket(family, kind, 0))\n"
            "pair = (ctypes.c_int * 2)()\n"
            "call('socketpair unix', libc.socketpair(1, 1, 0, pair))\n"
            "call('socketpair vsock', libc.socketpair(40, 1, 0, pair))\n"
        )
    )
    seen = _outcomes(run_python(code))
    allowed = ("unix", "inet", "inet6", "netlink", "socketpair unix")
    assert seen == {n: "ok" if n in allowed else "EAFNOSUPPORT" for n in seen}, seen
    assert len(seen) == len(families) + 2


_HOLD_TASKS = """
import subprocess, threading, time
for _ in range(2):
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
subprocess.run({marker!r})  # the fourth task, found by the host; killed by the test
"""
_COUNT_THREADS = """
import os, threading, time
made = 0
for _ in range(300):
    try:
        threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
    except RuntimeError:
        break
    made += 1
try:
    if os.fork() == 0:
        os._exit(0)
    forked = "ok"
except OSError as error:
    forked = error.strerror
print("threads", made, "fork", forked)
"""


def test_threads_count_as_tasks_of_each_call_alone(mechanism):
    """With max_processes=4 the code gets 3 threads beside its own and no fork (RLIMIT_NPROC
    under both mechanisms; the watchdog counted processes only and let 300 threads run), and a
    call holding 4 tasks at the same moment takes nothing from it (its own count)."""
    marker = ["sleep", f"30.{uuid.uuid4().int % 10**9:09d}"]
    holder = []
    thread = threading.Thread(target=lambda: holder.append(
        run_python(_HOLD_TASKS.format(marker=marker), max_processes=4, timeout_s=20.0)))  # fmt: skip
    thread.start()
    try:
        pid = _wait_for(marker, present=True, timeout_s=10.0)
        assert pid is not None, "the first call never held its four tasks"
        counted = run_python(_COUNT_THREADS, max_processes=4)
        assert _pid_running(marker) == pid, "the first call ended before the second counted"
    finally:
        if (pid := _pid_running(marker)) is not None:
            os.kill(pid, signal.SIGKILL)
        thread.join(30.0)
    assert (counted.status, counted.stdout) == (
        "ok", "threads 3 fork Resource temporarily unavailable\n"), counted  # fmt: skip
    assert holder and holder[0].status == "ok", holder


_FILL_SOCKETS = """
import socket
pairs, queued, chunk = [], 0, b"x" * 65536
for _ in range(480):  # 480 pairs of up to 4 MiB queued each: about 2 GiB unless stopped
    a, b = socket.socketpair()
    a.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    pairs.append((a, b))
    while True:
        try:
            queued += a.send(chunk)
        except BlockingIOError:
            break
    print("queued MiB", queued >> 20, flush=True)
"""


def _available_mib() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) >> 10 for line in f if line.startswith("MemAvailable"))


def test_kernel_buffers_are_bounded_or_the_watchdog_says_it_cannot(mechanism, monkeypatch,
                                                                   caplog):  # fmt: skip
    """Unix socket queues against a 64 MiB bound: the cgroup charges them (the call ends for
    memory after at most 64 MiB queued, the host's available memory falls by little). The
    watchdog cannot count them, so it is not run against them (about 1.5 GiB of the host's
    memory went there before): it says so in its one line, logged when it is chosen."""
    if mechanism == "bubblewrap+watchdog":
        monkeypatch.setattr(sandbox_isolation, "cgroups_work", lambda: False)
        with caplog.at_level(logging.WARNING, logger=sandbox_isolation.__name__):
            chosen = detected_isolation.__wrapped__()  # the probe again, uncached
        assert chosen.mode == mechanism
        lines = [r.getMessage() for r in caplog.records if "NOT SAFE FOR MEMORY" in r.getMessage()]
        assert lines == [f"Python sandbox: {chosen.describe()}"], caplog.text
        assert "not kernel buffers (socket and pipe queues" in chosen.describe()
        return
    lowest, before, done = [_available_mib()], _available_mib(), threading.Event()

    def watch():  # the host's available memory while the call runs, every 20 ms
        while not done.wait(0.02):
            lowest[0] = min(lowest[0], _available_mib())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run_python(_FILL_SOCKETS, memory_mb=64, timeout_s=20.0)
    finally:
        done.set()
        watcher.join()
    queued = [int(line.split()[-1]) for line in result.stdout.splitlines()]
    assert result.status == "memory" and queued and queued[-1] <= 64, result
    assert before - lowest[0] < 512, (before, lowest[0])  # noise of a shared host included


_LIBRARY = """
import sys, threading
from jaxrl_llm.envs.sandbox import run_python
marker = sys.argv[1]
for i, mechanism in enumerate(sys.argv[2:]):
    code = f"# {marker}\\nimport os\\nos.execvp('sleep', ['sleep', '{marker}{i}'])"
    threading.Thread(target=run_python, args=(code,),
                     kwargs={"timeout_s": 30.0, "mechanism": mechanism}).start()
"""


def _files_holding(needle: bytes) -> list[str]:
    """Files in the system temporary directory (and its sandbox directories) holding `needle`."""
    root, found = tempfile.gettempdir(), []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        paths = [path]
        if name.startswith(WORKDIR_PREFIX) and os.path.isdir(path):
            paths = [os.path.join(folder, f) for folder, _, files in os.walk(path) for f in files]
        for candidate in paths:
            try:
                with open(candidate, "rb") as f:
                    if needle in f.read(1 << 20):
                        found.append(candidate)
            except OSError:  # a directory, a socket, gone meanwhile
                continue
    return found


def test_a_killed_library_leaves_no_code_on_the_host():
    """A library process SIGKILLed while its calls run (one per mechanism): the code was never
    written to the host's disk, the sandboxed processes die with it, and the next process's
    sweep removes the cgroups it left."""
    found = sandbox_isolation.isolation()
    mechanisms = [m for m in MECHANISMS if m == "bubblewrap+watchdog" or found.mode == m]
    marker = f"60.{uuid.uuid4().int % 10**9:09d}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(jaxrl_llm.__file__)))
    groups_before = sandbox_cgroups()
    library = subprocess.Popen([sys.executable, "-c", _LIBRARY, marker, *mechanisms], cwd="/",
                               env={**os.environ, "PYTHONPATH": root})  # fmt: skip
    sleeps = [["sleep", f"{marker}{i}"] for i in range(len(mechanisms))]
    try:
        for argv in sleeps:
            assert _wait_for(argv, present=True, timeout_s=60.0), f"{argv} never ran"
        assert _files_holding(marker.encode()) == []  # while the calls run
    finally:
        library.kill()
        library.wait()
    for argv in sleeps:  # each sandbox dies with its bubblewrap (--die-with-parent)
        assert _wait_for(argv, present=False, timeout_s=10.0) is None, argv
    assert _files_holding(marker.encode()) == []
    deadline = time.monotonic() + 10.0  # the next process's sweep, once the trees are gone
    while sandbox_cgroups() != groups_before and time.monotonic() < deadline:
        sweep_stale_groups(min_age_s=0)
        time.sleep(0.1)
    assert sandbox_cgroups() == groups_before


_SHOW_HOST = """
import json, os
cmdlines = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    cmdlines[pid] = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
hidden = []
for name in ("environ", "exe", "cwd", "root"):
    try:
        os.readlink(f"/proc/1/{name}") if name != "environ" else open("/proc/1/environ").read()
    except PermissionError:
        hidden.append(name)
mounts = [line.split()[3:5] for line in open("/proc/self/mountinfo")]
print(json.dumps({"cmdlines": cmdlines, "hidden": hidden, "mounts": mounts}))
"""


def test_no_host_path_of_the_library_or_the_call_inside(mechanism):
    """/proc/1/cmdline is "bwrap --args FD" and the command (the options, with the venv's
    bubblewrap and the call's files, come by descriptor); every mount's source path inside its
    file system is its mount point (or bubblewrap's own tmpfs): the script is copied in, not
    bound from a host directory. The interpreter's install, mounted where it is, stays visible."""
    result = run_python(_SHOW_HOST, max_output_chars=100_000)
    assert result.status == "ok" and not result.truncated, result
    seen = json.loads(result.stdout)
    assert seen["cmdlines"]["1"].startswith("bwrap\0--args\0"), seen["cmdlines"]["1"]
    shown_inside = ("/usr/", "/bin/", "/sbin/", sandbox_isolation.interpreter()[1] + "/")
    candidates = {os.path.dirname(sandbox_isolation.isolation().bwrap), sys.prefix,
                  os.path.dirname(os.path.dirname(jaxrl_llm.__file__))}  # fmt: skip
    host_paths = {p for p in candidates if not (p + "/").startswith(shown_inside)}
    host_paths.add(WORKDIR_PREFIX)
    for pid, cmdline in seen["cmdlines"].items():
        assert not [path for path in host_paths if path in cmdline], (pid, cmdline)
    for root, point in seen["mounts"]:  # a file system's root, a path at its own place, a
        # proc or devtmpfs entry (/proc/sys, /dev/null), or bubblewrap's tmpfs and copied files
        assert (root in ("/", "/newroot") or root.startswith("/bindfile")
                or point in (root, "/proc" + root, "/dev" + root)), (root, point)  # fmt: skip
    assert seen["hidden"] == ["environ", "exe", "cwd", "root"], seen["hidden"]


def test_inotify_is_refused(mechanism):
    """No inotify watch on the trees the host shares read-only (it reported opens made outside
    the sandbox: a channel between concurrent calls); fanotify neither."""
    code = _CALLS + (
        "call('inotify_init1', libc.inotify_init1(0))\n"
        "call('inotify_add_watch', libc.inotify_add_watch(-1, b'/usr', 0x20))  # IN_OPEN\n"
        f"call('fanotify_init', libc.syscall({syscall_number('fanotify_init')}, 0, 0))\n"
    )
    if syscall_number("inotify_init") is not None:  # x86_64 has the old entry too
        code += f"call('inotify_init', libc.syscall({syscall_number('inotify_init')}))\n"
    seen = _outcomes(run_python(code))
    assert set(seen.values()) == {"EPERM"} and len(seen) >= 3, seen


def test_control_bytes_are_escaped_in_what_the_library_keeps(mechanism):
    """Terminal escapes, NUL, carriage return, bell and C1 controls in stdout and stderr are
    kept as visible escapes (tabs and newlines stay), in the result and the tool's output."""
    noise = "a\x1b[2J\x1b]0;title\x07\x00\r\x9bz\tq"
    code = f"import sys\nprint({noise!r})\nsys.stderr.write({noise!r})"
    result = run_python(code)
    escaped = "a\\x1b[2J\\x1b]0;title\\x07\\x00\\x0d\\x9bz\tq"
    assert (result.status, result.stdout, result.stderr) == ("ok", escaped + "\n", escaped)
    tool = python_sandbox_tool(timeout_s=5.0)
    shown = call_tool(
        {"python": tool}, "python", {"code": f"print({noise!r})\nraise SystemExit(1)"}
    )
    assert shown.status == ToolStatus.ERROR and escaped in shown.output, shown
    assert not any(ord(c) < 32 and c not in "\t\n" for c in shown.output), shown.output


def test_host_settings_keyrings_cgroups_and_call_directories_are_unchanged(host_before):
    """The last test: the host is as it was before the module."""
    assert_host_unchanged(host_before)
