"""The seccomp filter the Python sandbox's code runs under: system calls that reach kernel state
beyond the call are refused.

bubblewrap loads it (`--seccomp FD`) just before it starts the code, with no_new_privs set, so
the code and everything it starts keep it. A deny-list over the native architecture; each
refused call fails with EPERM, like a missing permission:

  namespaces, mounts    unshare, setns, clone with any CLONE_NEW* flag, mount, umount2,
                        pivot_root, chroot and the new mount API (fsopen ... mount_setattr):
                        the code cannot make a namespace of its own, so it cannot become root
                        there, remount /proc or a cgroup view, or raise its own limits.
  kernel keyrings       add_key, keyctl, request_key: no key outlives the call.
  kernel interfaces     bpf, perf_event_open, ptrace, process_vm_readv/writev, userfaultfd,
                        io_uring, kexec, modules, reboot, swap, syslog, acct, quotactl, clocks,
                        open_by_handle_at and name_to_handle_at, personality.
  memory it cannot see  memfd_create, memfd_secret, shmget, msgget: anonymous files and SysV
                        segments live outside every mounted, size-limited tmpfs, so the /proc
                        watchdog could not count them.
  file events           inotify_init, inotify_init1, inotify_add_watch: the read-only trees
                        (/usr, the interpreter) are the host's own files, so a watch there would
                        report opens made outside the sandbox, a channel between calls.

And one allow-list: `socket` and `socketpair` only for the families Python's standard library
needs inside, AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (`SOCKET_FAMILIES`); any other family
fails with EAFNOSUPPORT, as on a kernel without it. A network namespace does not cut every
family: AF_VSOCK reaches the hypervisor and binds ports in the host's space.

`clone3` fails with ENOSYS instead (its flags sit behind a pointer a filter cannot read), so
the C library falls back to `clone`, whose flags it can. Any call made through another
architecture's entry (32-bit `int 0x80`, x32) is refused whole. The program is classic BPF,
written out below for x86_64 and aarch64 (the two this library runs on); on any other
architecture `seccomp_filter()` is None and the sandbox is not safe there.
"""

from __future__ import annotations

import functools
import os
import platform
import struct
import sys
from typing import NamedTuple

# The filter's name and version, as logged; bump the version when the refused set changes.
FILTER_NAME = "jaxrl_llm-deny-v2"

_REFUSED = (
    # namespaces and mounts
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    # kernel keyrings
    "add_key", "keyctl", "request_key",
    # kernel interfaces
    "bpf", "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "syslog",
    "acct", "quotactl", "quotactl_fd", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "open_by_handle_at", "name_to_handle_at", "personality", "lookup_dcookie",
    "vhangup", "nfsservctl", "pidfd_getfd", "fanotify_init", "sethostname", "setdomainname",
    # memory no mounted tmpfs bounds
    "memfd_create", "memfd_secret", "shmget", "msgget",
    # events on files the host shares read-only
    "inotify_init1", "inotify_add_watch",
)  # fmt: skip
_X86_64_ONLY = ("iopl", "ioperm", "uselib", "ustat", "sysfs", "_sysctl", "create_module",
                "get_kernel_syms", "query_module", "inotify_init")  # fmt: skip
# The socket families allowed (<linux/socket.h>): AF_UNIX, AF_INET, AF_INET6, AF_NETLINK.
SOCKET_FAMILIES = (1, 2, 10, 16)

# System call numbers: <asm/unistd_64.h> (x86_64) and <asm-generic/unistd.h> (aarch64).
_X86_64 = {
    "shmget": 29, "socket": 41, "socketpair": 53, "clone": 56, "msgget": 68, "ptrace": 101, "syslog": 103, "uselib": 134,
    "personality": 135, "ustat": 136, "sysfs": 139, "vhangup": 153, "pivot_root": 155,
    "_sysctl": 156, "adjtimex": 159, "chroot": 161, "acct": 163, "settimeofday": 164,
    "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
    "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "create_module": 174,
    "init_module": 175, "delete_module": 176, "get_kernel_syms": 177, "query_module": 178,
    "quotactl": 179, "nfsservctl": 180, "lookup_dcookie": 212, "clock_settime": 227,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
    "inotify_init": 253, "inotify_add_watch": 254, "unshare": 272, "inotify_init1": 294,
    "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "finit_module": 313, "memfd_create": 319, "kexec_file_load": 320,
    "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438,
    "mount_setattr": 442, "quotactl_fd": 443, "memfd_secret": 447,
}  # fmt: skip
_AARCH64 = {
    "lookup_dcookie": 18, "inotify_init1": 26, "inotify_add_watch": 27, "umount2": 39, "mount": 40, "pivot_root": 41, "nfsservctl": 42,
    "chroot": 51, "vhangup": 58, "quotactl": 60, "acct": 89, "personality": 92, "unshare": 97,
    "kexec_load": 104, "init_module": 105, "delete_module": 106, "clock_settime": 112,
    "syslog": 116, "ptrace": 117, "reboot": 142, "sethostname": 161, "setdomainname": 162,
    "settimeofday": 170, "adjtimex": 171, "msgget": 186, "shmget": 194, "socket": 198,
    "socketpair": 199, "add_key": 217,
    "request_key": 218, "keyctl": 219, "clone": 220, "swapon": 224, "swapoff": 225,
    "perf_event_open": 241, "fanotify_init": 262, "name_to_handle_at": 264,
    "open_by_handle_at": 265, "clock_adjtime": 266, "setns": 268, "process_vm_readv": 270,
    "process_vm_writev": 271, "finit_module": 273, "memfd_create": 279, "bpf": 280,
    "userfaultfd": 282, "kexec_file_load": 294, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438,
    "mount_setattr": 442, "quotactl_fd": 443, "memfd_secret": 447,
}  # fmt: skip


class _Arch(NamedTuple):
    audit: int  # AUDIT_ARCH_* from <linux/audit.h>
    numbers: dict[str, int]
    refused: tuple[str, ...]
    foreign_from: int  # numbers at or above this are another ABI's (x32), 0 where none


_ARCHES = {
    "x86_64": _Arch(0xC000003E, _X86_64, _REFUSED + _X86_64_ONLY, 0x40000000),
    "aarch64": _Arch(0xC00000B7, _AARCH64, _REFUSED, 0),
}
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
# CLONE_NEWNET, from <linux/sched.h>. (CLONE_NEWTIME, 0x80, is clone's exit-signal byte; only
# unshare and clone3 take it, and both are refused.)
CLONE_NAMESPACE_FLAGS = 0x7E020000

# Classic BPF opcodes (<linux/filter.h>) and seccomp returns (<linux/seccomp.h>).
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS, _EAFNOSUPPORT = 1, 38, 97
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # the low half of args[0] on a little-endian machine


class SeccompFilter(NamedTuple):
    """The filter for this machine's architecture.

    Attributes:
      name: `FILTER_NAME` plus the architecture, e.g. "jaxrl_llm-deny-v2/x86_64".
      program: the BPF program, `struct sock_filter` records as bubblewrap reads them.
      refused: the system calls refused outright (clone with namespace flags besides).
    """

    name: str
    program: bytes
    refused: tuple[str, ...]

    def describe(self) -> str:
        """One line for the run's log."""
        return (f"seccomp {self.name}: {len(self.refused)} system calls refused (unshare, setns, "
                "mount, keyctl, bpf, ptrace, inotify, ...), clone with namespace flags refused, "
                "sockets of AF_UNIX/INET/INET6/NETLINK only")  # fmt: skip

    def pipe(self) -> int:
        """A fresh pipe's read end holding the program, for `bwrap --seccomp FD` (which reads
        it to its end and closes it); the caller closes its own copy once bwrap started."""
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, self.program)  # a few hundred bytes: within the pipe's buffer
        finally:
            os.close(write_end)
        return read_end


def _program(arch: _Arch) -> bytes:
    """The BPF program: refuse `arch.refused`, clone with namespace flags, clone3 (ENOSYS),
    sockets of a family not in `SOCKET_FAMILIES` (EAFNOSUPPORT), anything from a foreign ABI;
    allow the rest."""
    code: list[tuple[int, int | str, int | str, int]] = [  # (op, jump-if-true, if-false, k)
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 0, "deny", arch.audit),
        (_LD_ABS, 0, 0, _NR),
    ]
    if arch.foreign_from:
        code.append((_JGE, "deny", 0, arch.foreign_from))
    for name in sorted(arch.refused, key=arch.numbers.__getitem__):
        code.append((_JEQ, "deny", 0, arch.numbers[name]))
    code += [
        (_JEQ, "enosys", 0, arch.numbers["clone3"]),
        (_JEQ, "family", 0, arch.numbers["socket"]),
        (_JEQ, "family", 0, arch.numbers["socketpair"]),
        (_JEQ, 0, "allow", arch.numbers["clone"]),
        (_LD_ABS, 0, 0, _ARG0_LOW),
        (_JSET, "deny", "allow", CLONE_NAMESPACE_FLAGS),
    ]
    labels = {"family": len(code)}
    code.append((_LD_ABS, 0, 0, _ARG0_LOW))  # the family: an int, the low half of args[0]
    code += [(_JEQ, "allow", 0, family) for family in SOCKET_FAMILIES]
    code.append((_RET, 0, 0, _ERRNO | _EAFNOSUPPORT))  # any other family
    labels.update(allow=len(code), deny=len(code) + 1, enosys=len(code) + 2)
    code += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | _EPERM), (_RET, 0, 0, _ERRNO | _ENOSYS)]
    out = bytearray()
    for pc, (op, jt, jf, k) in enumerate(code):
        jt, jf = (labels[j] - pc - 1 if isinstance(j, str) else j for j in (jt, jf))
        assert 0 <= jt <= 255 and 0 <= jf <= 255, (pc, jt, jf)  # BPF jumps are one byte
        out += struct.pack("<HBBI", op, jt, jf, k)
    return bytes(out)


def syscall_number(name: str) -> int | None:
    """This machine's number for system call `name` (those the filter knows), else None."""
    arch = _ARCHES.get(platform.machine())
    return None if arch is None else arch.numbers.get(name)


@functools.cache
def seccomp_filter() -> SeccompFilter | None:
    """The filter for this machine, or None where it has none (not Linux on x86_64 or
    aarch64, or a big-endian machine)."""
    machine = platform.machine()
    arch = _ARCHES.get(machine)
    if arch is None or not sys.platform.startswith("linux") or sys.byteorder != "little":
        return None
    return SeccompFilter(f"{FILTER_NAME}/{machine}", _program(arch), tuple(sorted(arch.refused)))
