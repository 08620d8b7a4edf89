"""Running model-written Python in a fresh, isolated, limited process, and the "python" tool.

During RL the code comes from a policy optimised against a reward: code that deletes the run's
checkpoints or reads the verifier's answers is reward hacking, so the sandbox is a boundary, not
a convenience. Each `run_python` call starts `python -I -X utf8 main.py` under the strongest
isolation this machine allows (`sandbox_isolation.isolation()`, chosen once and named in the
run's log and metrics):

- files: bubblewrap builds a view of its own: read-only /, /usr, the interpreter's install,
  /dev (device nodes only) and /proc/sys; no /sys, /etc, /home, /root, /work or host /tmp: no
  run directory, checkpoint, task data or answers. The only writable places are two tmpfs of
  `disk_mb` MiB each, /tmp (the working directory and HOME) and /dev/shm, whose pages count
  against `memory_mb` (RLIMIT_FSIZE caps one file at 64 MiB).
- user and kernel: uid 65534, never mapped to host root even when the library runs as root
  (`sandbox_user`), no capabilities, no new user namespaces, and a seccomp filter refusing
  namespaces, mounts, keyrings, bpf, ptrace and the like (`sandbox_seccomp`).
- network, processes, IPC, hostname: unshared namespaces; the network namespace has only its
  own loopback, so every connection to the host or beyond fails; the pid namespace shows only
  the code's processes (not the parent's /proc/PID/environ) and dies with it.
- processes and memory of the whole tree: a cgroup per call (`sandbox_limits`, `max_processes`
  and `memory_mb` for all processes and their tmpfs together; the kernel's OOM killer ends the
  tree at the limit; the group is removed after every call, retried and checked), or a
  watchdog polling /proc where cgroups are not writable. RLIMIT_AS = `memory_mb` per process
  too, so a single huge allocation fails with MemoryError in the child; RLIMIT_NOFILE = 1024.
- time: a wall-clock limit of `timeout_s` (the tree is killed), RLIMIT_CPU = ceil(timeout_s) + 1
  CPU seconds per process as a backstop.
- environment: cleared except PATH, HOME/TMPDIR=/tmp, LANG/LC_ALL=C.UTF-8 and one-thread BLAS
  settings; stdin is /dev/null.
- output: stdout and stderr are read by threads that keep at most 4 * max_output_chars bytes
  each (the head of stdout, the tail of stderr), so gigabytes of output cannot fill the host.

Where no safe isolation works (no bubblewrap, or user namespaces refused), `run_python` and the
tool refuse to run (`SandboxUnavailableError`, saying what is missing and how to get it) unless
the caller passes `unsafe=True` (`config.env.sandbox_unsafe`): then the code runs with the old,
weak isolation ("namespaces": `unshare` user + network + pid namespaces, the host's files
visible; "process group": nothing but a Python-level socket block), in a private host temporary
directory that is removed afterwards.

Example:
  >>> run_python("print(6 * 7)")
  SandboxResult(status='ok', stdout='42\\n', stderr='', exit_code=0, truncated=False,
                seconds=0.07)
"""

from __future__ import annotations

import math
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import NamedTuple

from jaxrl_llm.envs.sandbox_isolation import (
    SANDBOX_DIR,
    WRITABLE_DIRS,
    Isolation,
    Launch,
    SandboxUnavailableError,
    bwrap_launch,
    clean_traceback,
    interpreter,
    isolation,
    require_safe,
)
from jaxrl_llm.envs.sandbox_limits import TreeLimits
from jaxrl_llm.envs.tools import Tool, ToolError, ToolTimeoutError

__all__ = [
    "SANDBOX_STATUSES",
    "SandboxResult",
    "SandboxUnavailableError",
    "python_sandbox_tool",
    "run_python",
    "sandbox_isolation",
]

SANDBOX_STATUSES = ("ok", "error", "timeout", "memory", "killed")
MAX_FILE_BYTES = 64 * 1024**2
MAX_OPEN_FILES = 1024  # also bounds the kernel buffers (sockets, pipes) a process can hold
_SCRIPT_NAME = "main.py"
_READ_CHUNK_BYTES = 1 << 16
# Seconds to wait for the output pipes to close and for a killed tree to be reaped.
_CLEANUP_WAIT_S = 2.0
# Seconds the "python" tool's caller waits beyond the sandbox's own limit (interpreter start,
# namespace setup and cleanup on a loaded machine) before it gives up on the call.
_TOOL_MARGIN_S = 5.0

_INIT_SHELL = ("/bin/sh", "-c", '"$@"; exit $?', "sandbox-init")
# Defaults of the whole tree: processes (threads count under a cgroup) and writable disk.
MAX_PROCESSES = 64
DISK_MB = 64

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
        allocation failure, or a process of the tree was killed at the tree's memory limit) or
        "killed" (ended by any other signal, e.g. SIGKILL or SIGSEGV).
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


def sandbox_isolation() -> str:
    """The isolation `run_python` uses on this machine (probed once, then cached).

    Returns:
      "bubblewrap+cgroup" (strongest), "bubblewrap+watchdog", or, where neither works, the
      unsafe "namespaces" or "process group" that run only with `unsafe=True`.

    Example:
      >>> sandbox_isolation()
      'bubblewrap+cgroup'
    """
    return isolation().mode


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
        (resource.RLIMIT_NOFILE, MAX_OPEN_FILES, MAX_OPEN_FILES),
    ]
    limits = []
    for which, soft, hard in wanted:
        host_hard = resource.getrlimit(which)[1]
        if host_hard != resource.RLIM_INFINITY:
            hard = min(hard, host_hard)
        limits.append((which, (min(soft, hard), hard)))
    return limits


def _environment(home: str) -> dict[str, str]:
    """The child's whole environment."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
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


class _Command(NamedTuple):
    argv: list[str]
    cwd: str | None  # host working directory (unsafe modes), None inside bubblewrap
    env: dict[str, str]
    pid_namespace: bool  # the tree dies with its init; exit status > 128 is a signal
    launch: Launch | None = None  # bubblewrap's descriptors (safe modes)


def _command(found: Isolation, workdir: str, *, network: bool, disk_mb: int) -> _Command:
    """How to start `main.py` (written in the host's `workdir`) under `found`."""
    python, _ = interpreter()
    script = os.path.join(workdir, _SCRIPT_NAME)
    if found.safe:
        launch = bwrap_launch(found, network=network, tmpfs_bytes=disk_mb * 1024**2)
        inside = os.path.join(SANDBOX_DIR, _SCRIPT_NAME)
        argv = [*launch.argv, "--ro-bind", script, inside]
        for key, value in _environment(SANDBOX_DIR).items():
            argv += ["--setenv", key, value]
        argv += launch.command(python, inside)
        return _Command(argv, None, {}, pid_namespace=True, launch=launch)
    prefix = found.unshare
    if network:
        prefix = tuple(flag for flag in prefix if flag != "--net")
        if "--pid" not in prefix:
            prefix = ()  # the namespace was only there to cut the network
    pid_namespace = "--pid" in prefix
    argv = [python, "-I", "-X", "utf8"]
    if network or "--net" in prefix:
        argv.append(_SCRIPT_NAME)
    else:
        argv += ["-c", _BLOCK_NETWORK_PRELUDE, _SCRIPT_NAME]
    init = list(_INIT_SHELL) if pid_namespace else []
    return _Command([*prefix, *init, *argv], workdir, _environment(workdir), pid_namespace)


def _kill_tree(process: subprocess.Popen) -> None:
    """Kills everything the run started and reaps `process`: its session's process group (the
    sandbox's init is in it; a pid namespace dies with its init)."""
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
    max_processes: int = MAX_PROCESSES,
    disk_mb: int = DISK_MB,
    unsafe: bool = False,
) -> SandboxResult:
    """Runs `code` as a script in a fresh, isolated, limited Python process (module docstring).

    Args:
      code: the script; its printed output is the result.
      timeout_s: wall-clock limit in seconds (> 0); the process tree is killed past it.
      memory_mb: memory of the whole process tree, and address space per process, in MiB
        (> 0; numpy needs about 100).
      max_output_chars: characters kept of stdout (its head) and of stderr (its tail).
      network: allow network access (no network namespace and no socket block).
      max_processes: processes the tree may hold at once (threads too, under a cgroup).
      disk_mb: the size in MiB of each writable tmpfs (/tmp and /dev/shm); what they hold
        counts against `memory_mb` too.
      unsafe: run even where only an unsafe isolation works (see the module docstring).

    Returns:
      A SandboxResult; it never raises for anything the code does.

    Raises:
      SandboxUnavailableError: no safe isolation here and `unsafe` is False.

    Example:
      >>> result = run_python("while True: pass", timeout_s=1.0)
      >>> result.status, result.exit_code
      ('timeout', None)
    """
    if not isinstance(code, str):
        raise TypeError(f"run_python: code must be a str, got {type(code).__name__}.")
    for name, value in (("timeout_s", timeout_s), ("memory_mb", memory_mb),
                        ("max_output_chars", max_output_chars), ("max_processes", max_processes),
                        ("disk_mb", disk_mb)):  # fmt: skip
        if not value > 0:
            raise ValueError(f"run_python: {name}={value!r} must be > 0; pass a positive number "
                             f"or leave the default.")  # fmt: skip
    found = require_safe(unsafe=unsafe)
    limits = _rlimits(timeout_s, memory_mb)
    tree = None
    if found.safe:
        mode = "cgroup" if found.mode == "bubblewrap+cgroup" else "watchdog"
        tree = TreeLimits(max_processes, memory_mb * 1024**2, mode=mode,
                          tmpfs_dirs=WRITABLE_DIRS)  # fmt: skip

    def set_limits():  # in the child between fork and exec: join the cgroups, set rlimits
        if tree is not None:
            tree.join()
        for which, values in limits:
            resource.setrlimit(which, values)

    workdir = tempfile.mkdtemp(prefix="jaxrl_llm_sandbox_")
    try:
        with open(os.path.join(workdir, _SCRIPT_NAME), "w", encoding="utf-8") as script:
            script.write(code)
        command = _command(found, workdir, network=network, disk_mb=disk_mb)
        start = time.perf_counter()
        try:
            process = subprocess.Popen(
                command.argv, cwd=command.cwd, env=command.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                preexec_fn=set_limits, pass_fds=command.launch.pass_fds if command.launch else (),
            )  # fmt: skip
        finally:
            if command.launch is not None:
                command.launch.close()  # bwrap holds its own copy of the filter's pipe
        if tree is not None:
            tree.watch(process.pid)
        cap_bytes = 4 * max_output_chars + 4
        stdout_reader = _CappedReader(process.stdout, cap_bytes, keep_tail=False)
        stderr_reader = _CappedReader(process.stderr, cap_bytes, keep_tail=True)
        try:
            process.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        seconds = time.perf_counter() - start
        _kill_tree(process)  # what is left: the whole tree after a timeout, else stragglers
        out_of_memory = tree is not None and tree.out_of_memory()
        if tree is not None:
            tree.close()
        stdout_bytes, stdout_dropped = stdout_reader.finish(_CLEANUP_WAIT_S)
        stderr_bytes, stderr_dropped = stderr_reader.finish(_CLEANUP_WAIT_S)
        process.stdout.close()
        process.stderr.close()
    finally:
        if tree is not None:
            tree.close()
        _remove_tree(workdir)

    stdout, stdout_cut = _decode(stdout_bytes, max_output_chars, keep_tail=False)
    stderr, stderr_cut = _decode(stderr_bytes, max_output_chars, keep_tail=True)
    stderr = stderr.replace(workdir + os.sep, "").replace(SANDBOX_DIR + os.sep, "")
    if command.launch is not None:
        stderr = clean_traceback(stderr)
    elif timed_out and command.pid_namespace:  # unshare complains when its child is killed
        stderr = _UNSHARE_NOISE.sub("", stderr)
    truncated = stdout_dropped or stderr_dropped or stdout_cut or stderr_cut
    exit_code = None if timed_out else process.returncode
    if exit_code is not None and command.pid_namespace and exit_code > 128:
        exit_code = -(exit_code - 128)  # the namespace init's report of a death by signal
    if timed_out or exit_code == -signal.SIGXCPU:
        status = "timeout"
    elif out_of_memory:  # the tree hit its memory limit (a process was killed for it)
        status = "memory"
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
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_chars: int = 2000,
    unsafe: bool = False,
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
      unsafe: accept an unsafe isolation where no safe one works (module docstring).

    Raises:
      SandboxUnavailableError: at construction, when no safe isolation works and `unsafe` is
        False: the tool refuses to start rather than run model code weakly isolated.

    Example:
      >>> from jaxrl_llm.envs.tools import call_tool
      >>> call_tool({"python": python_sandbox_tool()}, "python", {"code": "print(2**10)"}).output
      '1024\\n'
    """
    limit = f"{timeout_s:g} s"
    require_safe(unsafe=unsafe)

    def run(code: str) -> str:
        result = run_python(
            code,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            max_output_chars=max_output_chars,
            unsafe=unsafe,
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
