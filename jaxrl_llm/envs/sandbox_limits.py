"""Limits on a sandboxed process tree as a whole: its process count and its memory.

Per-process rlimits cannot bound a tree: ten processes of 400 MB each pass a 512 MB address-space
limit, and RLIMIT_NPROC counts the host user's processes (and is not enforced for root). So
`TreeLimits` uses, in order of strength:

  cgroup     a control group of its own per call (v1 `pids` and `memory` hierarchies, or v2's
             unified one), under this process's own group: `pids.max` refuses the fork past the
             limit (EAGAIN in the child), the memory limit lets the kernel's OOM killer end the
             tree, and both are counted by the kernel, race-free. Needs a writable cgroup
             filesystem (root on these machines, or a delegated v2 subtree).
  watchdog   a host thread polling the tree (/proc) every `poll_s`: more processes than the
             limit, or more memory in total (proportional set sizes, so pages a fork shares
             count once), kills the whole tree. A fork bomb or an
             allocation burst can overshoot between two polls (bounded by the poll interval).

The sandbox joins its group between fork and exec (`TreeLimits.join`, in the child), so
everything the code starts is in it; `close()` kills what is left and removes the group.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

_CGROUP_ROOT = "/sys/fs/cgroup"


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller ("pids", "memory") or for v2 (""), from
    /proc/self/cgroup."""
    out = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(","):
                    out[controller] = path
    except OSError:
        pass
    return out


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class _Groups:
    """The cgroup directories of one sandboxed call (v1: one per controller; v2: one)."""

    def __init__(self, max_processes: int, memory_bytes: int):
        own = _own_cgroups()
        name = f"jaxrl_llm_sandbox_{uuid.uuid4().hex[:12]}"
        self.dirs: list[str] = []
        self.memory_dir: str | None = None
        self.version = 0
        try:
            if "pids" in own and "memory" in own and os.path.isdir(f"{_CGROUP_ROOT}/pids"):
                self.version = 1
                pids = os.path.join(f"{_CGROUP_ROOT}/pids", own["pids"].lstrip("/"), name)
                memory = os.path.join(f"{_CGROUP_ROOT}/memory", own["memory"].lstrip("/"), name)
                for path in (pids, memory):
                    os.mkdir(path)
                    self.dirs.append(path)
                _write(os.path.join(pids, "pids.max"), str(max_processes))
                _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
                self.memory_dir = memory
            elif "" in own and os.path.exists(f"{_CGROUP_ROOT}/cgroup.controllers"):
                self.version = 2
                path = os.path.join(_CGROUP_ROOT, own[""].lstrip("/"), name)
                os.mkdir(path)
                self.dirs.append(path)
                _write(os.path.join(path, "pids.max"), str(max_processes))
                _write(os.path.join(path, "memory.max"), str(memory_bytes))
                try:
                    _write(os.path.join(path, "memory.swap.max"), "0")
                except OSError:  # no swap accounting: nothing to turn off
                    pass
                self.memory_dir = path
            else:
                raise OSError("no pids and memory cgroup controllers are mounted")
        except OSError:
            self.remove()
            raise

    def procs_files(self) -> list[str]:
        """The files a process writes its pid to, to join every group."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        """Processes still in the groups."""
        out: set[int] = set()
        for path in self.procs_files():
            try:
                with open(path) as f:
                    out.update(int(p) for p in f.read().split())
            except OSError:
                pass
        return out

    def out_of_memory(self) -> bool:
        """Whether the kernel hit the memory limit of the group (v1 failcnt, v2 oom events)."""
        if self.memory_dir is None:
            return False
        try:
            if self.version == 1:
                with open(os.path.join(self.memory_dir, "memory.failcnt")) as f:
                    return int(f.read().strip() or 0) > 0
            with open(os.path.join(self.memory_dir, "memory.events")) as f:
                events = dict(line.split() for line in f if line.strip())
            return int(events.get("oom_kill", 0)) > 0 or int(events.get("max", 0)) > 0
        except (OSError, ValueError):
            return False

    def remove(self) -> None:
        """Kills what is left in the groups and removes them."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        for path in reversed(self.dirs):
            try:
                os.rmdir(path)
            except OSError:
                pass
        self.dirs = []


def _tree(root: int) -> list[int]:
    """`root` and all its descendants, from /proc (children lists)."""
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def _memory_bytes(pid: int) -> int:
    """A process's proportional set size (its private pages plus its share of pages shared
    with others, e.g. a forked parent's), so a tree's sum counts each page once; the resident
    set size where smaps_rollup is missing."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class TreeLimits:
    """Process-count and memory limits of one sandboxed process tree (module docstring).

    Args:
      max_processes: processes (and threads, for cgroups) the tree may hold at once.
      memory_bytes: resident memory of the whole tree.
      mode: "cgroup" or "watchdog".
      poll_s: the watchdog's interval.
    """

    def __init__(self, max_processes: int, memory_bytes: int, *, mode: str, poll_s: float = 0.02):
        if mode not in ("cgroup", "watchdog"):
            raise ValueError(f"TreeLimits: mode={mode!r} must be 'cgroup' or 'watchdog'.")
        self.mode, self.max_processes, self.memory_bytes = mode, max_processes, memory_bytes
        self._groups = _Groups(max_processes, memory_bytes) if mode == "cgroup" else None
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.violation = ""  # what the watchdog killed the tree for

    def join(self) -> None:
        """Moves the calling process into the groups (call in the child before exec)."""
        if self._groups is not None:
            pid = str(os.getpid())
            for path in self._groups.procs_files():
                _write(path, pid)

    def watch(self, root_pid: int) -> None:
        """Starts the watchdog over `root_pid`'s tree (nothing to do with cgroups)."""
        if self.mode != "watchdog":
            return

        def loop():
            while not self._stop.wait(self._poll_s):
                pids = _tree(root_pid)
                if len(pids) > self.max_processes + 2:  # bwrap and its init are not the code's
                    self.violation = f"more than {self.max_processes} processes"
                elif sum(_memory_bytes(p) for p in pids) > self.memory_bytes:
                    self.violation = "memory"
                else:
                    continue
                for pid in reversed(pids):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                return

        self._thread = threading.Thread(target=loop, name="jaxrl_llm-sandbox-watch", daemon=True)
        self._thread.start()

    def out_of_memory(self) -> bool:
        """Whether the tree hit its memory limit."""
        if self._groups is not None:
            return self._groups.out_of_memory()
        return self.violation == "memory"

    def close(self) -> None:
        """Stops the watchdog; kills what is left of the tree's groups and removes them."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
        if self._groups is not None:
            self._groups.remove()


def cgroups_work() -> bool:
    """Whether this process can make a group with pids and memory limits (tried once)."""
    try:
        limits = TreeLimits(8, 64 << 20, mode="cgroup")
    except OSError:
        return False
    limits.close()
    return True
