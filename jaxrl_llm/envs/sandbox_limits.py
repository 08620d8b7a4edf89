"""Limits on a sandboxed process tree as a whole: its process count and its memory.

Per-process rlimits cannot bound a tree: ten processes of 400 MB each pass a 512 MB address-space
limit, and RLIMIT_NPROC counts the host user's processes (and is not enforced for root). So
`TreeLimits` uses, in order of strength:

  cgroup     a control group of its own per call (v1 `pids` and `memory` hierarchies, or v2's
             unified one), under this process's own group: `pids.max` refuses the fork past the
             limit (EAGAIN in the child), the memory limit lets the kernel's OOM killer end the
             tree, and both are counted by the kernel, race-free. Needs a writable cgroup
             filesystem (root on these machines, or a delegated v2 subtree).
  watchdog   a host thread polling the tree (/proc) every `poll_s`: more tasks (processes
             and their threads) than the limit, or more memory in total (proportional set
             sizes, so pages a fork shares count once, plus what the sandbox's tmpfs hold:
             their used blocks and 1 KiB per inode, read through /proc/PID/root), kills the
             whole tree. An allocation burst can overshoot between two polls (bounded by the
             poll interval); tasks cannot, the code's RLIMIT_NPROC refuses them
             (`sandbox_user`). Kernel buffers (socket and pipe queues) are not counted: the
             watchdog is no memory bound against code that fills them.

The sandbox joins its group between fork and exec (`TreeLimits.join`, in the child), so
everything the code starts is in it. `close()` kills what is left, waits until the groups hold
no process, removes them and checks they are gone, retrying for `REMOVE_DEADLINE_S`; a group
still there after that (a tree slow to die) goes to a background reaper that keeps trying
until the interpreter exits, and groups an earlier process left behind (killed before its
cleanup) are removed by the next process's first probe (`sweep_stale_groups`).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
import uuid

_CGROUP_ROOT = "/sys/fs/cgroup"
# Every sandbox group's name starts so (tests and the stale sweep look for it).
GROUP_PREFIX = "jaxrl_llm_sandbox_"
# Seconds `close()` retries before it hands a group to the background reaper.
REMOVE_DEADLINE_S = 10.0
# Kernel memory the watchdog charges per tmpfs inode (inode + dentry: about 1 KiB), so a flood
# of empty files counts against the memory bound too.
INODE_BYTES = 1024


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
        name = f"{GROUP_PREFIX}{uuid.uuid4().hex[:12]}"
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
                if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):
                    # memory + swap: tmpfs pages cannot leave the bound through swap
                    _write(os.path.join(memory, "memory.memsw.limit_in_bytes"), str(memory_bytes))
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
        """Whether the kernel hit the memory limit of the group (v1: OOM kills or failure
        counts of memory and memory + swap; v2: oom events)."""
        if self.memory_dir is None:
            return False
        try:
            if self.version == 1:
                with open(os.path.join(self.memory_dir, "memory.oom_control")) as f:
                    control = dict(line.split() for line in f if line.strip())
                if int(control.get("oom_kill", 0)) > 0:
                    return True
                for name in ("memory.failcnt", "memory.memsw.failcnt"):
                    path = os.path.join(self.memory_dir, name)
                    if os.path.exists(path):
                        with open(path) as f:
                            if int(f.read().strip() or 0) > 0:
                                return True
                return False
            with open(os.path.join(self.memory_dir, "memory.events")) as f:
                events = dict(line.split() for line in f if line.strip())
            return int(events.get("oom_kill", 0)) > 0 or int(events.get("max", 0)) > 0
        except (OSError, ValueError):
            return False

    def remove(self, deadline_s: float | None = None) -> bool:
        """Kills what is left in the groups, waits until they are empty, removes them and
        checks they are gone, retrying with back-off for `deadline_s` (`REMOVE_DEADLINE_S`);
        True when all are."""
        deadline_s = REMOVE_DEADLINE_S if deadline_s is None else deadline_s
        end, delay = time.monotonic() + deadline_s, 0.002
        while self.dirs:
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if not pids:
                for path in reversed(self.dirs):
                    try:
                        os.rmdir(path)
                    except OSError:  # EBUSY while a dying task is still counted: retried
                        pass
                self.dirs = [path for path in self.dirs if os.path.isdir(path)]
            if not self.dirs or time.monotonic() > end:
                break
            time.sleep(delay)
            delay = min(2 * delay, 0.1)
        return not self.dirs


_leftovers: list[_Groups] = []  # groups close() could not remove yet
_leftovers_lock = threading.Lock()
_reaper_thread: threading.Thread | None = None


def _reap_leftovers(deadline_s: float) -> None:
    """Retries removing the groups `close()` could not, until each is gone (or `deadline_s`)."""
    with _leftovers_lock:
        pending = list(_leftovers)
    done = [groups for groups in pending if groups.remove(deadline_s)]
    with _leftovers_lock:
        for groups in done:
            _leftovers.remove(groups)


def _reaper() -> None:
    while True:
        time.sleep(1.0)
        _reap_leftovers(1.0)


def _hand_to_reaper(groups: _Groups) -> None:
    global _reaper_thread
    with _leftovers_lock:
        _leftovers.append(groups)
        if _reaper_thread is None:
            _reaper_thread = threading.Thread(target=_reaper, name="jaxrl_llm-sandbox-reaper",
                                              daemon=True)  # fmt: skip
            _reaper_thread.start()
            atexit.register(_reap_leftovers, REMOVE_DEADLINE_S)


def leftover_groups() -> list[str]:
    """Group directories of this process's calls not removed yet (the reaper still tries)."""
    with _leftovers_lock:
        return [path for groups in _leftovers for path in groups.dirs]


def sweep_stale_groups(min_age_s: float = 60.0) -> int:
    """Removes empty sandbox groups older than `min_age_s` (left by a process killed before
    its cleanup) beside this process's own groups; returns how many it removed."""
    own = _own_cgroups()
    parents = {
        os.path.join(_CGROUP_ROOT, controller, path.lstrip("/"))
        for controller, path in own.items()
        if controller in ("pids", "memory")
    }
    if "" in own:
        parents.add(os.path.join(_CGROUP_ROOT, own[""].lstrip("/")))
    removed = 0
    for parent in parents:
        try:
            names = [n for n in os.listdir(parent) if n.startswith(GROUP_PREFIX)]
        except OSError:
            continue
        for name in names:
            path = os.path.join(parent, name)
            try:
                if time.time() - os.stat(path).st_mtime < min_age_s:
                    continue
                os.rmdir(path)  # refused (EBUSY) while any process is in it
                removed += 1
            except OSError:
                pass
    return removed


def _tree(root: int) -> tuple[list[int], int]:
    """`root` and all its descendants, from /proc (children lists), and how many tasks
    (threads) they hold together."""
    out, tasks, stack = [], 0, [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        try:
            threads = os.listdir(f"/proc/{pid}/task")
            tasks += len(threads)
            for task in threads:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out, tasks


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


def _tmpfs_bytes(pids: list[int], dirs: tuple[str, ...]) -> int:
    """What the tmpfs mounted at `dirs` inside the sandbox hold: used blocks plus `INODE_BYTES`
    per inode, read through the first of `pids` whose root is not the host's (bubblewrap has
    pivoted into the sandbox's view); 0 before there is one."""
    host_root = os.stat("/")
    for pid in pids:
        try:
            root = os.stat(f"/proc/{pid}/root")
            if (root.st_dev, root.st_ino) == (host_root.st_dev, host_root.st_ino):
                continue
            total = 0
            for path in dirs:
                st = os.statvfs(f"/proc/{pid}/root{path}")
                total += ((st.f_blocks - st.f_bfree) * st.f_frsize
                          + (st.f_files - st.f_ffree) * INODE_BYTES)  # fmt: skip
            return total
        except OSError:  # the process exited meanwhile: try the next
            continue
    return 0


class TreeLimits:
    """Process-count and memory limits of one sandboxed process tree (module docstring).

    Args:
      max_processes: tasks (processes and threads) the tree may hold at once.
      memory_bytes: memory of the whole tree, its tmpfs contents included.
      mode: "cgroup" or "watchdog".
      poll_s: the watchdog's interval.
      tmpfs_dirs: where the sandbox mounts its writable tmpfs (inside its own mount
        namespace); the watchdog counts what they hold (a cgroup is charged for it anyway).

    Example:
      >>> limits = TreeLimits(64, 512 << 20, mode="watchdog", tmpfs_dirs=("/tmp",))
      >>> limits.close()
    """

    def __init__(self, max_processes: int, memory_bytes: int, *, mode: str,
                 poll_s: float = 0.02, tmpfs_dirs: tuple[str, ...] = ()):  # fmt: skip
        if mode not in ("cgroup", "watchdog"):
            raise ValueError(f"TreeLimits: mode={mode!r} must be 'cgroup' or 'watchdog'.")
        for name, value in (("max_processes", max_processes), ("memory_bytes", memory_bytes)):
            if not value > 0:
                raise ValueError(f"TreeLimits: {name}={value!r} must be > 0; pass a positive "
                                 "limit.")  # fmt: skip
        self.mode, self.max_processes, self.memory_bytes = mode, max_processes, memory_bytes
        self._groups = _Groups(max_processes, memory_bytes) if mode == "cgroup" else None
        self._poll_s, self._tmpfs_dirs = poll_s, tuple(tmpfs_dirs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.violation = ""  # what the watchdog killed the tree for

    @property
    def group_dirs(self) -> list[str]:
        """The call's cgroup directories not removed yet ([] for the watchdog)."""
        return list(self._groups.dirs) if self._groups is not None else []

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
                pids, tasks = _tree(root_pid)
                in_tmpfs = _tmpfs_bytes(pids, self._tmpfs_dirs) if self._tmpfs_dirs else 0
                if tasks > self.max_processes:
                    self.violation = f"more than {self.max_processes} tasks"
                elif in_tmpfs + sum(_memory_bytes(p) for p in pids) > self.memory_bytes:
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

    def close(self) -> bool:
        """Stops the watchdog; kills what is left of the tree's groups and removes them
        (module docstring). Returns whether they are gone now (else the reaper has them)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
        groups, closed, self._closed = self._groups, self._closed, True
        if groups is None or not groups.dirs:
            return True
        if closed:  # a second close(): the first one removed the groups or handed them over
            return False
        if groups.remove():
            return True
        _hand_to_reaper(groups)
        return False


def cgroups_work() -> bool:
    """Whether this process can make a group with pids and memory limits (tried once); first
    removes the stale groups an earlier process left (`sweep_stale_groups`)."""
    sweep_stale_groups()
    try:
        limits = TreeLimits(8, 64 << 20, mode="cgroup")
    except OSError:
        return False
    limits.close()
    return True
