"""Running model-written Python in a fresh, limited subprocess, and the "python" tool.

Each `run_python` call starts one process, `sys.executable -I -X utf8 main.py` (`-I`: no user
site-packages, no PYTHON* variables, no script directory on sys.path; the interpreter's own
site-packages stay importable), and it runs under these limits:

- files: a private temporary directory (`jaxrl_llm_sandbox_*` under the host's temp dir) is the
  working directory, HOME and TMPDIR; it holds the code as `main.py` and is removed afterwards,
  whatever the code left in it;
- environment: cleared except PATH, HOME, TMPDIR, LANG/LC_ALL=C.UTF-8, LD_LIBRARY_PATH (when the
  host sets it) and one-thread settings for BLAS/OpenMP and malloc arenas (so numpy can start
  under the memory limit); stdin is /dev/null;
- memory: RLIMIT_AS = `memory_mb` MiB of address space per process; allocations past it raise
  MemoryError in the child (status "memory");
- time: a wall-clock limit of `timeout_s` seconds, after which the whole process tree is killed
  (status "timeout"), and RLIMIT_CPU = ceil(timeout_s) + 1 s of CPU per process as a backstop;
- files written: RLIMIT_FSIZE = 64 MiB per file (a bigger write fails with "File too large");
  core dumps off (RLIMIT_CORE = 0);
- output: stdout and stderr are read by threads that keep at most 4 * max_output_chars bytes
  each (the head of stdout, the tail of stderr, where a traceback ends) and discard the rest, so
  a process printing gigabytes cannot fill the host's memory;
- isolation (`sandbox_isolation()`, detected once per process by trying each variant on
  `/bin/sh -c "exit 0"`):
  "pid+net namespaces": where unprivileged user namespaces work, the command runs under
  `unshare --user --map-root-user --net --pid --fork --kill-child --mount-proc` (or the same
  without `--mount-proc` if only that fails). Its only network interface is a loopback that is
  down, so every connect fails, even to 127.0.0.1 ("Network is unreachable"); /proc shows only
  its own processes (sysfs still lists the host's interfaces); and every process it starts dies
  with the namespace when the code exits or is killed, even one that called setsid. `/bin/sh`
  is the namespace's init (PID 1), so the code itself gets ordinary signal behaviour; as a shell
  reports death by signal N as exit status 128 + N, an exit status above 128 is reported as
  killed by signal status - 128 in this mode.
  "net namespace": where only `unshare --user --map-root-user --net` works, the network is cut
  the same way and children are handled as in the fallback.
  "process group" (the fallback, where unshare is missing or refused): the process gets its own
  session and process group, which is killed with SIGKILL at the end; a child that calls setsid
  escapes that kill. The network is blocked only at the Python level (`socket.socket` refuses
  AF_INET/AF_INET6; tracebacks then show two runpy frames), a weak block that `_socket`, ctypes
  or a subprocess such as curl get around.
  `network=True` drops the network namespace and the socket block.

What it does NOT protect against (it is not a security boundary against a determined attacker):
the code runs on the same kernel, as the same host user (root only inside its namespace), and
can read every file that user can read and write where that user can write outside the temporary
directory; there is no seccomp filter, no cgroup (the memory limit is per process, so many
processes can together use more; there is no limit on the number of processes, so a fork bomb
is bounded only by the wall-clock limit and the namespace teardown), no bound on the total disk
it writes (only per file), and the CPU limit is per process. It is meant to contain mistakes and
runaway code from a model under training, on a machine whose files are not secret.

Example:
  >>> run_python("print(6 * 7)")
  SandboxResult(status='ok', stdout='42\\n', stderr='', exit_code=0, truncated=False,
                seconds=0.05)
"""

from __future__ import annotations

import functools
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import NamedTuple

from jaxrl_llm.envs.tools import Tool, ToolError, ToolTimeoutError

__all__ = [
    "SANDBOX_STATUSES",
    "SandboxResult",
    "python_sandbox_tool",
    "run_python",
    "sandbox_isolation",
]

SANDBOX_STATUSES = ("ok", "error", "timeout", "memory", "killed")
MAX_FILE_BYTES = 64 * 1024**2
_SCRIPT_NAME = "main.py"
_READ_CHUNK_BYTES = 1 << 16
# Seconds to wait for the output pipes to close and for a killed tree to be reaped.
_CLEANUP_WAIT_S = 2.0
# Seconds the "python" tool's caller waits beyond the sandbox's own limit (interpreter start,
# namespace setup and cleanup on a loaded machine) before it gives up on the call.
_TOOL_MARGIN_S = 5.0

# unshare flag sets, strongest first; the first that runs `/bin/sh -c "exit 0"` is used.
_NAMESPACE_CANDIDATES = (
    (
        "pid+net namespaces",
        ("--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"),
    ),
    (
        "pid+net namespaces",
        ("--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"),
    ),
    ("net namespace", ("--user", "--map-root-user", "--net")),
)
_PROCESS_GROUP = "process group"
_INIT_SHELL = ("/bin/sh", "-c", '"$@"; exit $?', "sandbox-init")

# Run instead of `main.py` when the network must be blocked without a network namespace
# (run_path gives main.py fresh globals, so none of these names are visible to it).
_BLOCK_NETWORK_PRELUDE = """\
import runpy, socket, sys
class _NoNetworkSocket(socket.socket):
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if fileno is None and family in (-1, socket.AF_INET, socket.AF_INET6):
            raise OSError(101, "network access is disabled in this sandbox")
        super().__init__(family, type, proto, fileno)
socket.socket = _NoNetworkSocket
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
_UNSHARE_NOISE = re.compile(r"^unshare: .*\n?", re.MULTILINE)
_MEMORY_ERROR = re.compile(r"^MemoryError\b|Cannot allocate memory|std::bad_alloc", re.MULTILINE)


class SandboxResult(NamedTuple):
    """The outcome of one `run_python` call.

    Attributes:
      status: "ok" (exit status 0), "error" (non-zero exit), "timeout" (ran past the wall-clock
        limit, or the CPU limit's SIGXCPU), "memory" (failed with MemoryError or another
        allocation failure) or "killed" (ended by any other signal, e.g. SIGKILL or SIGSEGV).
      stdout: the first `max_output_chars` characters the code printed.
      stderr: the last `max_output_chars` characters of its stderr (the end of a traceback);
        paths inside the temporary directory are shown relative to it ("main.py").
      exit_code: the exit status; negative N when killed by signal N; None after a timeout.
      truncated: stdout or stderr was longer than `max_output_chars` and was cut.
      seconds: wall time from start to exit (or to the kill).

    Example:
      >>> run_python("1/0").status, run_python("1/0").stderr.splitlines()[-1]
      ('error', 'ZeroDivisionError: division by zero')
    """

    status: str
    stdout: str
    stderr: str
    exit_code: int | None
    truncated: bool
    seconds: float


@functools.cache
def _namespace_prefix() -> tuple[str, tuple[str, ...]]:
    """(isolation name, unshare argv prefix) of the strongest isolation that works here."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return _PROCESS_GROUP, ()
    for name, flags in _NAMESPACE_CANDIDATES:
        try:
            probe = subprocess.run(
                [unshare, *flags, "/bin/sh", "-c", "exit 0"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return name, (unshare, *flags)
    return _PROCESS_GROUP, ()


def sandbox_isolation() -> str:
    """The isolation `run_python` uses on this machine (detected once, then cached).

    Returns:
      "pid+net namespaces" (strongest), "net namespace", or "process group" (no unshare).

    Example:
      >>> sandbox_isolation()
      'pid+net namespaces'
    """
    return _namespace_prefix()[0]


class _CappedReader:
    """Reads a pipe to its end in a daemon thread, keeping the head or the tail of the bytes."""

    def __init__(self, pipe, cap_bytes: int, *, keep_tail: bool):
        self._pipe, self._cap, self._keep_tail = pipe, cap_bytes, keep_tail
        self.data = bytearray()
        self.total_bytes = 0
        self._thread = threading.Thread(target=self._read, name="jaxrl_llm-sandbox-io", daemon=True)
        self._thread.start()

    def _read(self):
        fd = self._pipe.fileno()
        try:
            while chunk := os.read(fd, _READ_CHUNK_BYTES):
                self.total_bytes += len(chunk)
                if self._keep_tail:
                    self.data += chunk
                    if len(self.data) > self._cap:
                        del self.data[: len(self.data) - self._cap]
                elif len(self.data) < self._cap:
                    self.data += chunk[: self._cap - len(self.data)]
        except OSError:
            pass

    def finish(self, timeout_s: float) -> tuple[bytes, bool]:
        """(kept bytes, whether any were dropped) once the pipe closes or `timeout_s` passes."""
        self._thread.join(timeout_s)
        data = bytes(self.data)
        return data, self.total_bytes > len(data)


def _rlimits(timeout_s: float, memory_mb: int) -> list[tuple[int, tuple[int, int]]]:
    """The (resource, (soft, hard)) limits of the child, never above the host's hard limits."""
    cpu_s = math.ceil(timeout_s) + 1
    wanted = [
        (resource.RLIMIT_AS, memory_mb * 1024**2, memory_mb * 1024**2),
        (resource.RLIMIT_CPU, cpu_s, cpu_s + 1),
        (resource.RLIMIT_FSIZE, MAX_FILE_BYTES, MAX_FILE_BYTES),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    limits = []
    for which, soft, hard in wanted:
        host_hard = resource.getrlimit(which)[1]
        if host_hard != resource.RLIM_INFINITY:
            hard = min(hard, host_hard)
        limits.append((which, (min(soft, hard), hard)))
    return limits


def _environment(workdir: str) -> dict[str, str]:
    """The child's whole environment."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
    }
    if "LD_LIBRARY_PATH" in os.environ:
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return env


def _command(network: bool) -> tuple[list[str], bool, bool]:
    """(argv, whether a pid namespace holds the tree, whether the network is cut by a namespace)."""
    isolation, prefix = _namespace_prefix()
    if network:
        prefix = tuple(flag for flag in prefix if flag != "--net")
        if isolation == "net namespace":
            prefix = ()  # the namespace was only there to cut the network
    pid_namespace = "--pid" in prefix
    net_namespace = "--net" in prefix
    python = [sys.executable, "-I", "-X", "utf8"]
    if network or net_namespace:
        python.append(_SCRIPT_NAME)
    else:
        python += ["-c", _BLOCK_NETWORK_PRELUDE, _SCRIPT_NAME]
    init = list(_INIT_SHELL) if pid_namespace else []
    return [*prefix, *init, *python], pid_namespace, net_namespace


def _kill_tree(process: subprocess.Popen, pid_namespace: bool) -> None:
    """Kills everything the run started and reaps `process`.

    In a pid namespace, killing its init (the child of unshare) tears the namespace down; unshare
    then exits after every process in it is gone. Otherwise (or if that fails), the process
    group is killed.
    """
    if pid_namespace:
        try:
            path = f"/proc/{process.pid}/task/{process.pid}/children"
            with open(path) as children:
                for pid in children.read().split():
                    os.kill(int(pid), signal.SIGKILL)
            process.wait(timeout=_CLEANUP_WAIT_S)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _remove_tree(path: str) -> None:
    """Removes a directory tree even where the code took away its own permissions."""
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            try:
                os.chmod(os.path.join(root, name), 0o700)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


def _decode(data: bytes, max_chars: int, *, keep_tail: bool) -> tuple[str, bool]:
    """The kept bytes as text cut to `max_chars` (head or tail), and whether it was cut."""
    text = data.decode("utf-8", errors="replace")
    if len(text) <= max_chars:
        return text, False
    return (text[-max_chars:], True) if keep_tail else (text[:max_chars], True)


def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_chars: int = 4000,
    network: bool = False,
) -> SandboxResult:
    """Runs `code` as a script in a fresh, limited Python process (see the module docstring).

    Args:
      code: the script; its printed output is the result.
      timeout_s: wall-clock limit in seconds (> 0); the process tree is killed past it.
      memory_mb: address-space limit per process, in MiB (> 0; numpy needs about 100).
      max_output_chars: characters kept of stdout (its head) and of stderr (its tail).
      network: allow network access (no network namespace and no socket block).

    Returns:
      A SandboxResult; it never raises for anything the code does.

    Example:
      >>> result = run_python("while True: pass", timeout_s=1.0)
      >>> result.status, result.exit_code
      ('timeout', None)
    """
    if not isinstance(code, str):
        raise TypeError(f"run_python: code must be a str, got {type(code).__name__}.")
    if not timeout_s > 0:
        raise ValueError(f"run_python: timeout_s={timeout_s} must be > 0.")
    if not memory_mb > 0:
        raise ValueError(f"run_python: memory_mb={memory_mb} must be > 0.")
    if not max_output_chars > 0:
        raise ValueError(f"run_python: max_output_chars={max_output_chars} must be > 0.")
    argv, pid_namespace, _ = _command(network)
    limits = _rlimits(timeout_s, memory_mb)

    def set_limits():  # runs in the child between fork and exec: keep it to setrlimit calls
        for which, values in limits:
            resource.setrlimit(which, values)

    workdir = tempfile.mkdtemp(prefix="jaxrl_llm_sandbox_")
    try:
        with open(os.path.join(workdir, _SCRIPT_NAME), "w", encoding="utf-8") as script:
            script.write(code)
        start = time.perf_counter()
        process = subprocess.Popen(
            argv,
            cwd=workdir,
            env=_environment(workdir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=set_limits,
        )
        cap_bytes = 4 * max_output_chars + 4
        stdout_reader = _CappedReader(process.stdout, cap_bytes, keep_tail=False)
        stderr_reader = _CappedReader(process.stderr, cap_bytes, keep_tail=True)
        try:
            process.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(process, pid_namespace)
        seconds = time.perf_counter() - start
        if not timed_out:
            _kill_tree(process, pid_namespace=False)  # children left in the group, if any
        stdout_bytes, stdout_dropped = stdout_reader.finish(_CLEANUP_WAIT_S)
        stderr_bytes, stderr_dropped = stderr_reader.finish(_CLEANUP_WAIT_S)
        process.stdout.close()
        process.stderr.close()
    finally:
        _remove_tree(workdir)

    stdout, stdout_cut = _decode(stdout_bytes, max_output_chars, keep_tail=False)
    stderr, stderr_cut = _decode(stderr_bytes, max_output_chars, keep_tail=True)
    stderr = stderr.replace(workdir + os.sep, "")
    if timed_out and pid_namespace:  # unshare complains when its child is killed under it
        stderr = _UNSHARE_NOISE.sub("", stderr)
    truncated = stdout_dropped or stderr_dropped or stdout_cut or stderr_cut
    exit_code = None if timed_out else process.returncode
    if exit_code is not None and pid_namespace and exit_code > 128:
        exit_code = -(exit_code - 128)  # the init shell's report of a death by signal
    if timed_out or exit_code == -signal.SIGXCPU:
        status = "timeout"
    elif exit_code == 0:
        status = "ok"
    elif _MEMORY_ERROR.search(stderr):
        status = "memory"
    elif exit_code < 0:
        status = "killed"
    else:
        status = "error"
    return SandboxResult(status, stdout, stderr, exit_code, truncated, seconds)


def _failure_text(headline: str, result: SandboxResult, budget: int) -> str:
    """A headline plus what the code printed, the stderr tail given at least half the budget."""
    stderr = result.stderr[-(budget // 2) :] if result.stderr else ""
    stdout = result.stdout[: max(budget - len(stderr), 0)]
    parts = [headline]
    if stdout:
        parts.append(f"stdout:\n{stdout}")
    if stderr:
        parts.append(f"stderr:\n{stderr}")
    return "\n".join(parts)


def python_sandbox_tool(
    *, timeout_s: float = 5.0, memory_mb: int = 512, max_output_chars: int = 2000
) -> Tool:
    """The "python" tool: one required string parameter "code", run by `run_python`.

    The model reads the code's stdout (or "(no output ...)" when it printed nothing). A failure is
    reported through `call_tool`'s statuses: a non-zero exit or a signal is ERROR, running out of
    memory is ERROR with "ran out of memory", a time-out is TIMEOUT; each message carries the
    stdout and the tail of stderr (the traceback). Every call is a fresh process: nothing
    persists between calls.

    Args:
      timeout_s: the sandbox's wall-clock limit; the tool's own `timeout_s` is 5 s more.
      memory_mb: address-space limit per process, in MiB.
      max_output_chars: characters of output the model reads (plus a short headline).

    Example:
      >>> from jaxrl_llm.envs.tools import call_tool
      >>> call_tool({"python": python_sandbox_tool()}, "python", {"code": "print(2**10)"}).output
      '1024\\n'
    """
    limit = f"{timeout_s:g} s"

    def run(code: str) -> str:
        result = run_python(
            code, timeout_s=timeout_s, memory_mb=memory_mb, max_output_chars=max_output_chars
        )
        if result.status == "ok":
            if not result.stdout:
                return "(no output; print() the values you want to see)"
            # `truncated` also covers stderr; stdout was cut only if it is at the cap.
            cut = result.truncated and len(result.stdout) == max_output_chars
            return result.stdout + ("\n...[output truncated]" if cut else "")
        if result.status == "timeout":
            headline = f"the code ran past its {limit} limit and was stopped"
            raise ToolTimeoutError(_failure_text(headline, result, max_output_chars))
        if result.status == "memory":
            headline = f"the code ran out of memory (limit {memory_mb} MiB)"
        elif result.status == "killed":
            headline = f"the code was killed by signal {-result.exit_code}"
        else:
            headline = f"the code failed with exit status {result.exit_code}"
        raise ToolError(_failure_text(headline, result, max_output_chars))

    return Tool(
        name="python",
        description=(
            "Runs a Python 3 script in a fresh sandbox and returns what it prints to stdout. "
            f"No network, no input, {limit} and {memory_mb} MiB at most; nothing persists "
            "between calls, so print() every value you need."
        ),
        parameters={
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python script to run."}},
            "required": ["code"],
        },
        fn=run,
        timeout_s=timeout_s + _TOOL_MARGIN_S,
        max_output_chars=max_output_chars + 200,
    )
