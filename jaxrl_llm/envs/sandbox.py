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
  against `memory_mb` (RLIMIT_FSIZE caps one file at 64 MiB). The script is copied in from a
  memory file and bubblewrap reads its options from another (`--args`): nothing of the call is
  written to the host's disk, and no host path of the library, its venv or the call shows
  inside (/proc/1/cmdline, /proc/self/mountinfo), only the interpreter's install, mounted
  where it is, and the host's block device named in mountinfo.
- user and kernel: uid 65534, never mapped to host root even when the library runs as root
  (`sandbox_user`), no capabilities, no new user namespaces, and a seccomp filter refusing
  namespaces, mounts, keyrings, bpf, ptrace, inotify and the like, and sockets of any family
  but AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (`sandbox_seccomp`).
- network, processes, IPC, hostname: unshared namespaces; the network namespace has only its
  own loopback, so every connection to the host or beyond fails; the pid namespace shows only
  the code's processes (not the parent's /proc/PID/environ) and dies with it.
- tasks and memory of the whole tree: `max_processes` tasks (processes and threads) by the
  code's RLIMIT_NPROC, which the kernel counts for this call alone (`sandbox_user`); a cgroup
  per call (`sandbox_limits`, `max_processes` and `memory_mb` for all processes, their kernel
  buffers and their tmpfs together; the kernel's OOM killer ends the tree at the limit; the
  group is removed after every call, retried and checked), or a watchdog polling /proc where
  cgroups are not writable, which counts process memory and tmpfs but not kernel buffers
  (socket and pipe queues): not a memory bound against hostile code, as its `describe()` line
  says. RLIMIT_AS = `memory_mb` per process too, so a single huge allocation fails with
  MemoryError in the child; RLIMIT_NOFILE = 1024.
- time: a wall-clock limit of `timeout_s` (the tree is killed), RLIMIT_CPU = ceil(timeout_s) + 1
  CPU seconds per process as a backstop.
- environment: cleared except PATH, HOME/TMPDIR=/tmp, LANG/LC_ALL=C.UTF-8 and one-thread BLAS
  settings; stdin is /dev/null.
- output: stdout and stderr are read by threads that keep at most 4 * max_output_chars bytes
  each (the head of stdout, the tail of stderr), so gigabytes of output cannot fill the host;
  control characters but newline and tab come back as escapes (`sandbox_output`).

Where no safe isolation works (no bubblewrap, or user namespaces refused), `run_python` and the
tool refuse to run (`SandboxUnavailableError`, saying what is missing and how to get it) unless
the caller passes `unsafe=True` (`config.env.sandbox_unsafe`): then the code runs with the old,
weak isolation ("namespaces": `unshare` user + network + pid namespaces, the host's files
visible; "process group": nothing but a Python-level socket block), in a private host temporary
directory that is removed afterwards, or by the next process if this one is killed
(`sandbox_workdir`).

Example:
  >>> run_python("print(6 * 7)")
  SandboxResult(status='ok', stdout='42\\n', stderr='', exit_code=0, truncated=False,
                seconds=0.07)
"""

from __future__ import annotations

import math
import numbers
import os
import re
import resource
import signal
import subprocess
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
    python_command,
    require_safe,
)
from jaxrl_llm.envs.sandbox_limits import TreeLimits
from jaxrl_llm.envs.sandbox_output import CappedReader, decode_output
from jaxrl_llm.envs.sandbox_workdir import make_workdir, remove_workdir
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
# Seconds to wait for the output pipes to close and for a killed tree to be reaped.
_CLEANUP_WAIT_S = 2.0
# Seconds the "python" tool's caller waits beyond the sandbox's own limit (interpreter start,
# namespace setup and cleanup on a loaded machine) before it gives up on the call.
_TOOL_MARGIN_S = 5.0

_INIT_SHELL = ("/bin/sh", "-c", '"$@"; exit $?', "sandbox-init")
# Defaults of the whole tree: tasks (processes and threads) and writable disk.
MAX_PROCESSES = 64
# Tasks of the tree that are not the code's: bubblewrap and its init in the sandbox.
_LAUNCHER_TASKS = 2
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
    launch: Launch | None = None  # bubblewrap's binary and descriptors (safe modes)


def _command(found: Isolation, code: str, workdir: str | None, *, network: bool, disk_mb: int,
             max_processes: int) -> _Command:  # fmt: skip
    """How to start `code` under `found`: copied into the sandbox (safe modes), or as `main.py`
    written in the host's `workdir` (unsafe modes)."""
    python, _ = interpreter()
    if found.safe:
        inside = os.path.join(SANDBOX_DIR, _SCRIPT_NAME)
        command = python_command(python, inside, found.user.task_limit(max_processes))
        launch = bwrap_launch(found, command, network=network, tmpfs_bytes=disk_mb * 1024**2,
                              files=((inside, code.encode("utf-8")),),
                              env=_environment(SANDBOX_DIR))  # fmt: skip
        return _Command(launch.argv, None, {}, pid_namespace=True, launch=launch)
    with open(os.path.join(workdir, _SCRIPT_NAME), "w", encoding="utf-8") as script:
        script.write(code)
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


def _check_limits(caller: str, **limits: float) -> None:
    """Raises ValueError naming the first limit that is not a positive number, and the fix."""
    for name, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
            raise ValueError(f"{caller}: {name}={value!r} must be > 0; pass a positive number "
                             "or leave the default.")  # fmt: skip


def _kill_tree(process: subprocess.Popen) -> None:
    """Kills everything the run started and reaps `process`: its session's process group (the
    sandbox's init is in it; a pid namespace dies with its init)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


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
    mechanism: str = "",
) -> SandboxResult:
    """Runs `code` as a script in a fresh, isolated, limited Python process (module docstring).

    Args:
      code: the script; its printed output is the result.
      timeout_s: wall-clock limit in seconds (> 0); the process tree is killed past it.
      memory_mb: memory of the whole process tree, and address space per process, in MiB
        (> 0; numpy needs about 100).
      max_output_chars: characters kept of stdout (its head) and of stderr (its tail).
      network: allow network access (no network namespace and no socket block).
      max_processes: tasks (processes and threads) the tree may hold at once.
      disk_mb: the size in MiB of each writable tmpfs (/tmp and /dev/shm); what they hold
        counts against `memory_mb` too.
      unsafe: run even where only an unsafe isolation works (see the module docstring).
      mechanism: a safe mechanism to use ("bubblewrap+cgroup" or "bubblewrap+watchdog")
        instead of the strongest this host has ("").

    Returns:
      A SandboxResult; it never raises for anything the code does.

    Raises:
      SandboxUnavailableError: no safe isolation here and `unsafe` is False.
      ValueError: a limit is not positive, or `mechanism` is not one this host can give.

    Example:
      >>> result = run_python("while True: pass", timeout_s=1.0)
      >>> result.status, result.exit_code
      ('timeout', None)
    """
    if not isinstance(code, str):
        raise TypeError(f"run_python: code must be a str, got {type(code).__name__}.")
    _check_limits("run_python", timeout_s=timeout_s, memory_mb=memory_mb,
                  max_output_chars=max_output_chars, max_processes=max_processes,
                  disk_mb=disk_mb)  # fmt: skip
    found = require_safe(unsafe=unsafe, mechanism=mechanism)
    limits = _rlimits(timeout_s, memory_mb)
    tree = None
    if found.safe:
        mode = "cgroup" if found.mode == "bubblewrap+cgroup" else "watchdog"
        tree = TreeLimits(max_processes + _LAUNCHER_TASKS, memory_mb * 1024**2, mode=mode,
                          tmpfs_dirs=WRITABLE_DIRS)  # fmt: skip

    def set_limits():  # in the child between fork and exec: join the cgroups, set rlimits
        if tree is not None:
            tree.join()
        for which, values in limits:
            resource.setrlimit(which, values)

    workdir, workdir_lock = make_workdir() if not found.safe else (None, -1)
    command, process = None, None
    try:
        command = _command(found, code, workdir, network=network, disk_mb=disk_mb,
                           max_processes=max_processes)  # fmt: skip
        launch = command.launch
        start = time.perf_counter()
        try:
            process = subprocess.Popen(
                command.argv, executable=launch.executable if launch else None, cwd=command.cwd,
                env=command.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=set_limits,
                pass_fds=launch.pass_fds if launch else (),
            )  # fmt: skip
        finally:
            if launch is not None:
                launch.close()  # bwrap has read (or holds its own copy of) each of them
        if tree is not None:
            tree.watch(process.pid)
        cap_bytes = 4 * max_output_chars + 4
        stdout_reader = CappedReader(process.stdout, cap_bytes, keep_tail=False)
        stderr_reader = CappedReader(process.stderr, cap_bytes, keep_tail=True)
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
        if command is not None and command.launch is not None:
            # bwrap killed (a time-out, the watchdog, the OOM killer): its tree may linger
            killed = process is not None and (process.returncode is None or process.returncode < 0)
            command.launch.release(killed=killed)
        if workdir is not None:
            remove_workdir(workdir, workdir_lock)

    stdout, stdout_cut = decode_output(stdout_bytes, max_output_chars, keep_tail=False)
    stderr, stderr_cut = decode_output(stderr_bytes, max_output_chars, keep_tail=True)
    if workdir is not None:
        stderr = stderr.replace(workdir + os.sep, "")
    stderr = stderr.replace(SANDBOX_DIR + os.sep, "")
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
    mechanism: str = "",
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
      mechanism: a safe mechanism to use instead of the strongest (`run_python`).

    Raises:
      SandboxUnavailableError: at construction, when no safe isolation works and `unsafe` is
        False: the tool refuses to start rather than run model code weakly isolated.
      ValueError: at construction, a limit that is not positive or a `mechanism` this host
        cannot give.

    Example:
      >>> from jaxrl_llm.envs.tools import call_tool
      >>> call_tool({"python": python_sandbox_tool()}, "python", {"code": "print(2**10)"}).output
      '1024\\n'
    """
    _check_limits("python_sandbox_tool", timeout_s=timeout_s, memory_mb=memory_mb,
                  max_output_chars=max_output_chars)  # fmt: skip
    limit = f"{timeout_s:g} s"
    require_safe(unsafe=unsafe, mechanism=mechanism)

    def run(code: str) -> str:
        result = run_python(
            code,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            max_output_chars=max_output_chars,
            unsafe=unsafe,
            mechanism=mechanism,
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
