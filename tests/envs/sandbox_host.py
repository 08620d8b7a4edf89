"""The host's state the hostile sandbox suites compare before and after their module: kernel
settings, keyrings, sandbox cgroups and the call directories in the system temporary directory.
"""

import os
import tempfile
import time

from jaxrl_llm.envs.sandbox_limits import GROUP_PREFIX, REMOVE_DEADLINE_S
from jaxrl_llm.envs.sandbox_workdir import WORKDIR_PREFIX

MECHANISMS = ("bubblewrap+cgroup", "bubblewrap+watchdog")
# Host settings (under /proc/sys) compared before and after a module.
SETTINGS = ("kernel/core_pattern", "kernel/printk_ratelimit", "kernel/printk_ratelimit_burst",
            "kernel/hostname", "kernel/domainname", "kernel/pid_max", "kernel/modprobe",
            "vm/overcommit_memory", "user/max_user_namespaces", "fs/protected_symlinks",
            "net/core/somaxconn")  # fmt: skip


def sandbox_cgroups() -> list[str]:
    """Every sandbox cgroup directory on the host, and every directory below this process's
    own groups when they are not a hierarchy's root (where the sandbox makes its own)."""
    found = []
    for folder, dirs, _ in os.walk("/sys/fs/cgroup"):
        found += [os.path.join(folder, d) for d in dirs if d.startswith(GROUP_PREFIX)]
        dirs[:] = [d for d in dirs if not d.startswith(GROUP_PREFIX)]
    with open("/proc/self/cgroup") as f:
        own = [line.rstrip("\n").split(":", 2) for line in f]
    for _, controllers, path in own:
        # a process at a hierarchy's root makes its groups there, prefixed (found above);
        # walking the whole root would count every other program's groups on the host
        if controllers in ("pids", "memory", "") and path.strip("/"):
            top = os.path.join("/sys/fs/cgroup", controllers, path.lstrip("/"))
            for folder, dirs, _ in os.walk(top):
                found += [f"below own: {os.path.join(folder, d)}" for d in dirs]
    return sorted(found)


def keys() -> tuple[set, str]:
    """(id, uid, type and description) of every key root sees, and /proc/key-users' users."""
    try:
        with open("/proc/keys") as f:
            seen = {(fields[0], fields[5], " ".join(fields[7:]).split(":")[0])
                    for fields in (line.split() for line in f)}  # fmt: skip
        with open("/proc/key-users") as f:
            users = " ".join(sorted(line.split(":")[0].strip() for line in f))
    except OSError:  # a kernel without keys: nothing to compare
        return set(), ""
    return seen, users


def workdirs() -> list[str]:
    """The sandbox call directories in the system temporary directory."""
    return sorted(n for n in os.listdir(tempfile.gettempdir()) if n.startswith(WORKDIR_PREFIX))


def host_state() -> dict:
    """Settings, keys, sandbox cgroups and call directories of the host, now."""
    settings = {}
    for name in SETTINGS:
        try:
            with open(f"/proc/sys/{name}") as f:
                settings[name] = f.read()
        except OSError:
            pass
    return {"settings": settings, "keys": keys(), "cgroups": sandbox_cgroups(),
            "workdirs": workdirs()}  # fmt: skip


def assert_host_unchanged(before: dict) -> None:
    """Asserts the host is as `before`, waiting out calls that are still finishing (e.g. in
    another pytest-xdist worker) for at most `REMOVE_DEADLINE_S`."""
    deadline = time.monotonic() + REMOVE_DEADLINE_S
    while host_state() != before and time.monotonic() < deadline:
        time.sleep(0.2)
    after = host_state()
    for part in ("settings", "keys", "cgroups", "workdirs"):
        assert after[part] == before[part], part
