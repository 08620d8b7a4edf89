"""Hostile model code against the Python sandbox (issues 38 and 44): every attempt fails inside
the sandbox, and the run directory and the machine are left as they were.

A fake run directory (config.json, a checkpoint) is the test's working directory; the code knows
its absolute paths, as a policy that learned them would. Issue 44's classes, from a red-team pass
on a root host: writing kernel settings under /proc/sys, nested namespaces and cgroup mounts to
raise its own limits, kernel keys left for the next call, floods of /dev/shm and the other
writable places, cgroups left behind. Each runs under every mechanism this machine has
("bubblewrap+cgroup" where cgroups are writable, "bubblewrap+watchdog" always), as root here and
as uid 65534 where that uid can run this interpreter. The host's settings, keyrings and
cgroup tree are compared before and after the module (the last test). Runs only under a safe
isolation (bubblewrap); elsewhere it skips naming the mechanism that is missing.

Safety of the host: a setting is only ever written with the value it already has, and
kernel.core_pattern and /proc/sysrq-trigger are only opened, never written.
"""

import hashlib
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from jaxrl_llm.envs import sandbox_isolation as sandbox_isolation_module
from jaxrl_llm.envs.sandbox import run_python
from jaxrl_llm.envs.sandbox_isolation import isolation
from jaxrl_llm.envs.sandbox_seccomp import syscall_number
from tests.envs.sandbox_host import assert_host_unchanged, keys, sandbox_cgroups

# The host's settings, keys, cgroups and call directories are compared after the module.
pytestmark = pytest.mark.usefixtures("safe_sandbox", "host_before")


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A run directory as the runners leave it, as the working directory, and its digest."""
    (tmp_path / "config.json").write_text('{"task": {"name": "chain_sum"}}')
    (tmp_path / "checkpoints" / "5").mkdir(parents=True)
    (tmp_path / "checkpoints" / "5" / "params.bin").write_bytes(os.urandom(4096))
    (tmp_path / "answers.jsonl").write_text('{"answer": 42}\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAXRL_LLM_HOST_SECRET", "do-not-leak")
    return tmp_path


def _digest(root) -> str:
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            digest.update(path.encode())
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


def _attempts(run_dir) -> dict[str, tuple[str, str]]:
    """name -> (code, what its failure looks like: a status or an exception in stderr)."""
    d = str(run_dir)
    return {
        "read /etc/passwd": ("print(open('/etc/passwd').read())", "FileNotFoundError"),
        "read config.json": (f"print(open({d + '/config.json'!r}).read())", "FileNotFoundError"),
        "read a checkpoint": (
            f"print(len(open({d + '/checkpoints/5/params.bin'!r}, 'rb').read()))",
            "FileNotFoundError",
        ),
        "write into the run": (f"open({d + '/hacked.txt'!r}, 'w').write('x')", "Error"),
        "delete the run": (f"import shutil; shutil.rmtree({d!r})", "FileNotFoundError"),
        "curl": (
            "import os; code = os.system('curl -sS -m 3 http://example.com >/dev/null 2>&1')\n"
            "assert code == 0, f'curl failed: {code}'",
            "curl failed",
        ),
        "raw _socket": (
            "import _socket; s = _socket.socket(); s.settimeout(3)\ns.connect(('1.1.1.1', 53))",
            "Network is unreachable",
        ),
        "ctypes connect": (
            "import ctypes, socket, struct\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)\n"
            "addr = struct.pack('<HH4s8x', socket.AF_INET, socket.htons(53), bytes([1, 1, 1, 1]))\n"
            "assert libc.connect(fd, addr, len(addr)) == 0, f'errno {ctypes.get_errno()}'",
            "errno 101",  # ENETUNREACH
        ),
        "200 forks": (  # EAGAIN from a cgroup, or the watchdog ends the tree (held 3 s, so
            # a watchdog slowed by a loaded machine still sees them)
            "import os, time\nfor _ in range(200):\n    if os.fork() == 0:\n"
            "        time.sleep(3); os._exit(0)\ntime.sleep(3)\nprint('forked 200')",
            "processes",
        ),
        "10 x 400 MB": (
            "import os, time\nkids = []\nfor _ in range(10):\n    pid = os.fork()\n    if pid == 0:\n"
            "        data = b'1' * (400 * 2**20)\n        time.sleep(2)\n        os._exit(0)\n"
            "    kids.append(pid)\n"
            "codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids]\n"
            "assert codes == [0] * 10, codes",
            "memory",
        ),
        "10 GB write": (
            "with open('big', 'wb') as f:\n    for _ in range(10 * 1024):\n"
            "        f.write(b'0' * 2**20)",
            "Error",
        ),
        "300 MB in files": (
            "for i in range(30):\n    open(f'f{i}', 'wb').write(b'0' * (10 * 2**20))",
            "No space left on device",
        ),
        "while True": ("while True: pass", "timeout"),
        "100 MB of output": ("import sys\nsys.stdout.write('x' * 10**8)", "truncated"),
        "parent's environment": (
            "import os\nseen = []\nfor p in filter(str.isdigit, os.listdir('/proc')):\n"
            "    try:\n        seen.append(open(f'/proc/{p}/environ', 'rb').read())\n"
            "    except PermissionError:  # bubblewrap's own processes\n        pass\n"
            "assert seen and not any(b'do-not-leak' in s for s in seen)\n"
            "assert 'JAXRL_LLM_HOST_SECRET' not in os.environ\nprint('no secret')",
            "no secret",
        ),
    }


def test_every_attempt_fails_inside_and_the_run_is_untouched(run_dir, mechanism):
    before = _digest(run_dir)
    for name, (code, failure) in _attempts(run_dir).items():
        start = time.perf_counter()
        timeout_s = 3.0 if failure == "timeout" else 20.0  # ten 400 MB fills on a busy host
        result = run_python(code, timeout_s=timeout_s, memory_mb=512, max_output_chars=2000)
        seconds = time.perf_counter() - start
        if failure in ("timeout", "memory"):
            assert result.status == failure, (name, result)
        elif failure == "truncated":
            assert result.truncated and len(result.stdout) == 2000, name
        elif failure == "processes":
            assert result.status in ("error", "killed") and not result.stdout, (name, result)
            assert result.status == "killed" or "Resource temporarily" in result.stderr, name
        elif failure == "no secret":
            assert (result.status, result.stdout) == ("ok", "no secret\n"), (name, result)
        else:
            assert result.status in ("error", "memory"), (name, result)
            assert failure in result.stderr, (name, result.stderr)
        assert seconds < timeout_s + 5, (name, seconds)
        assert _digest(run_dir) == before, f"{name} changed the run directory"
    assert not (run_dir / "hacked.txt").exists()


def test_watchdog_bounds_the_tree_without_cgroups(run_dir, monkeypatch):
    """Where cgroups are not writable, a host thread bounds processes and memory."""
    watched = isolation()._replace(mode="bubblewrap+watchdog")
    monkeypatch.setattr(sandbox_isolation_module, "isolation", lambda: watched)
    forks = run_python(
        "import os, time\nfor _ in range(200):\n    if os.fork() == 0:\n"
        "        time.sleep(3); os._exit(0)\ntime.sleep(3)\nprint('all forked')",
        timeout_s=5.0,
    )
    assert forks.status in ("killed", "error") and "all forked" not in forks.stdout
    memory = run_python(
        "import os, time\nfor _ in range(10):\n    if os.fork() == 0:\n"
        "        data = b'1' * (400 * 2**20); time.sleep(3); os._exit(0)\ntime.sleep(3)\n"
        "print('all allocated')",
        timeout_s=8.0,
        memory_mb=512,
    )
    assert memory.status == "memory" and "all allocated" not in memory.stdout


# What the code of issue 44's classes prints: one "<attempt> <errno name>" line per attempt, or
# "<attempt> DONE" where the attempt went through.
_ATTEMPT = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    try:
        fn()
        print(name, "DONE")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def call(name, result):
    print(name, "DONE" if result >= 0 else errno.errorcode[ctypes.get_errno()])
"""

_KERNEL_SETTINGS = _ATTEMPT + """
def write_same(path):  # the value it already has: harmless even where it goes through
    value = open(path).read()
    with open(path, "w") as f:
        f.write(value)
attempt("printk_ratelimit", lambda: write_same("/proc/sys/kernel/printk_ratelimit"))
attempt("printk_ratelimit_burst", lambda: write_same("/proc/sys/kernel/printk_ratelimit_burst"))
attempt("somaxconn", lambda: write_same("/proc/sys/net/core/somaxconn"))
attempt("core_pattern", lambda: os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY)))
attempt("sysrq-trigger", lambda: os.close(os.open("/proc/sysrq-trigger", os.O_WRONLY)))
attempt("sys", lambda: os.listdir("/sys/fs/cgroup"))
"""  # fmt: skip


def test_kernel_settings_cannot_be_written(mechanism):
    """/proc/sys is read-only, /sys is absent and the code is no owner of root's files."""
    result = run_python(_KERNEL_SETTINGS)
    assert result.status == "ok", result
    seen = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
    assert seen["printk_ratelimit"] == seen["printk_ratelimit_burst"] == "EROFS", seen
    assert seen["somaxconn"] in ("EROFS", "ENOENT"), seen  # (the sandbox's own network's)
    assert seen["core_pattern"] in ("EACCES", "EROFS"), seen  # only opened: nothing written
    assert seen["sysrq-trigger"] in ("EACCES", "EROFS", "ENOENT"), seen
    assert seen["sys"] == "ENOENT", seen


def _nested_namespaces() -> str:
    clone = syscall_number("clone")
    return _ATTEMPT + f"""
NEWUSER, NEWNS, NEWCGROUP, NEWPID = 0x10000000, 0x00020000, 0x02000000, 0x20000000
call("unshare user+mount+cgroup", libc.unshare(NEWUSER | NEWNS | NEWCGROUP))
call("unshare mount", libc.unshare(NEWNS))
pid = libc.syscall({clone}, NEWUSER | NEWPID | 17, 0, 0, 0, 0)  # 17: SIGCHLD
if pid == 0:
    os._exit(0)
call("clone with namespaces", pid)
fd = os.open("/proc/self/ns/user", os.O_RDONLY)
call("setns", libc.setns(fd, 0))
os.makedirs("/tmp/cg", exist_ok=True)
call("mount cgroup2", libc.mount(b"none", b"/tmp/cg", b"cgroup2", 0, None))
call("mount cgroup", libc.mount(b"none", b"/tmp/cg", b"cgroup", 0, b"pids,memory"))
attempt("pids.max", lambda: open("/sys/fs/cgroup/pids.max", "w").write("1000"))
status = os.system("unshare --user --map-root-user --mount --cgroup true 2>/dev/null")
print("unshare(1)", "DONE" if status == 0 else "EPERM")
print("escalations done", flush=True)
import time
kids = 0
for _ in range(150):
    if os.fork() == 0:
        time.sleep(3)
        os._exit(0)
    kids += 1
print("forked", kids, flush=True)
time.sleep(3)  # holding them: the watchdog sees them even on a loaded machine
print("held", kids)
"""  # fmt: skip


def test_no_namespace_no_mount_no_raised_limit(mechanism):
    """The red team's path to more processes and memory (a user namespace of its own, a cgroup
    view mounted there, pids.max rewritten) fails at every step; 150 processes stay out."""
    result = run_python(_nested_namespaces(), timeout_s=10.0)
    lines = result.stdout.splitlines()
    assert "escalations done" in lines, result
    steps = dict(line.rsplit(" ", 1) for line in lines[: lines.index("escalations done")])
    assert steps == {
        "unshare user+mount+cgroup": "EPERM", "unshare mount": "EPERM",
        "clone with namespaces": "EPERM", "setns": "EPERM", "mount cgroup2": "EPERM",
        "mount cgroup": "EPERM", "pids.max": "ENOENT", "unshare(1)": "EPERM",
    }, steps  # fmt: skip
    assert "held" not in result.stdout, result  # EAGAIN (cgroup) or killed (watchdog)
    if mechanism == "bubblewrap+cgroup":
        assert "forked 150" not in result.stdout and "Resource temporarily" in result.stderr
    assert result.status in ("error", "killed"), result


def _keys_code() -> str:
    add_key, request_key, keyctl = map(syscall_number, ("add_key", "request_key", "keyctl"))
    return _ATTEMPT + f"""
for ring, name in ((-3, "session"), (-4, "user"), (-5, "user session")):  # KEY_SPEC_*
    call(f"add_key to {{name}}", libc.syscall({add_key}, b"user", b"jaxrl_llm_probe", b"x", 1, ring))
call("request_key", libc.syscall({request_key}, b"user", b"jaxrl_llm_probe", None, 0))
call("keyctl", libc.syscall({keyctl}, 0, -3, 0))  # KEYCTL_GET_KEYRING_ID of the session's
"""  # fmt: skip


def test_no_kernel_key_outlives_a_call(mechanism):
    """Keyrings are out of reach: adding a key fails, so the next call finds none either."""
    before = keys()
    for _ in range(2):  # the second call would find what the first one left
        result = run_python(_keys_code())
        assert result.status == "ok", result
        assert [line.rsplit(" ", 1)[1] for line in result.stdout.splitlines()] == ["EPERM"] * 5
    assert keys() == before


_FLOOD = _ATTEMPT + """
def fill(folder):  # 1 MiB files (RLIMIT_FSIZE caps one file) until the tmpfs is full
    written = 0
    try:
        for i in range(1024):
            with open(f"{folder}/flood{i}", "wb") as f:
                f.write(b"1" * 2**20)
            written += 1
    finally:
        print(folder, written, flush=True)
for folder in ("/dev/shm", "/tmp"):
    attempt(f"fill {folder}", lambda: fill(folder))
attempt("write /", lambda: open("/flood", "wb"))
attempt("write /dev", lambda: open("/dev/flood", "wb"))
attempt("write /proc", lambda: open("/proc/flood", "wb"))
"""  # fmt: skip


def test_shared_memory_and_every_writable_place_are_bounded(mechanism):
    """1 GiB into /dev/shm against 256 MiB: each tmpfs stops at `disk_mb`, / and /dev are
    read-only, /proc takes no files."""
    result = run_python(_FLOOD, memory_mb=256, disk_mb=64)
    assert result.status == "ok", result
    assert result.stdout.splitlines() == [
        "/dev/shm 64", "fill /dev/shm ENOSPC", "/tmp 64", "fill /tmp ENOSPC",
        "write / EROFS", "write /dev EROFS", "write /proc ENOENT",
    ], result.stdout  # fmt: skip


def test_tmpfs_contents_count_against_the_memory_bound(mechanism):
    """300 MB in /tmp and /dev/shm (200 MiB each allowed) against a 256 MiB bound: the tree is
    ended for memory, under the cgroup (charged pages) and the watchdog (counted) alike."""
    code = ("for folder in ('/tmp', '/dev/shm'):\n    for i in range(3):\n"
            "        open(f'{folder}/f{i}', 'wb').write(b'1' * (50 * 2**20))\n"
            "import time\ntime.sleep(3)\nprint('wrote 300 MB')")  # fmt: skip
    result = run_python(code, memory_mb=256, disk_mb=200, timeout_s=20.0)
    assert (result.status, result.stdout) == ("memory", ""), result


def test_no_cgroup_is_left_after_a_timeout_an_oom_kill_or_a_file_flood(mechanism):
    """The call's cgroups are gone when it returns, however it ended."""
    before = sandbox_cgroups()
    endings = [  # (code, time limit, how the call ends)
        ("import subprocess\nsubprocess.Popen(['sleep', '60'])\nwhile True: pass", 1.0, "timeout"),
        ("data = [b'1' * 2**20 for _ in range(1024)]", 20.0, "memory"),
        ("for i in range(100_000):\n    open(f'e{i}', 'w').close()", 60.0, "ok"),  # files
    ]
    for code, timeout_s, status in endings:
        result = run_python(code, timeout_s=timeout_s, memory_mb=256)
        assert result.status == status, result
        assert sandbox_cgroups() == before, status


def test_the_code_runs_as_host_uid_65534_not_root():
    """Seen from the host, the sandboxed process is uid 65534 (root's caller: not root), and
    its user namespace maps no host root."""
    marker = ["sleep", f"60.{uuid.uuid4().int % 10**9:09d}"]
    code = f"import os\nos.execvp('sleep', {marker!r})"
    thread = threading.Thread(target=run_python, args=(code,), kwargs={"timeout_s": 5.0})
    thread.start()
    wanted, pid, deadline = ("\0".join(marker) + "\0").encode(), None, time.monotonic() + 4
    while pid is None and time.monotonic() < deadline:
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    pid = int(entry) if f.read() == wanted else pid
            except OSError:
                continue
        time.sleep(0.05)
    try:
        assert pid is not None, "the sandboxed sleep never showed up"
        with open(f"/proc/{pid}/status") as f:
            uids = next(line.split()[1:] for line in f if line.startswith("Uid:"))
        with open(f"/proc/{pid}/uid_map") as f:
            host_ids = [int(line.split()[1]) for line in f]
    finally:
        thread.join()
    expected = 65534 if os.geteuid() == 0 else os.geteuid()
    assert uids == [str(expected)] * 4 and host_ids == [expected], (uids, host_ids)


_AS_NOBODY = """
import sys
from jaxrl_llm.envs.sandbox import run_python
from jaxrl_llm.envs.sandbox_isolation import isolation
print(isolation().describe())
for code in sys.argv[1:]:
    print(run_python(code, memory_mb=256).stdout, end="")
"""


def test_a_non_root_caller_is_held_too():
    """The same classes with the library run as uid 65534 (bubblewrap's own user namespace,
    `--disable-userns`, the watchdog): where that uid can run this interpreter."""
    if os.geteuid() != 0:
        pytest.skip("this whole module already runs as a non-root user")
    setpriv = sandbox_isolation_module.isolation().user.setpriv
    drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": root, "HOME": "/tmp"}
    probe = ("from jaxrl_llm.envs.sandbox_isolation import isolation\n"
             "print(isolation().safe, isolation().why_not_safe)")  # fmt: skip
    check = subprocess.run([*drop, sys.executable, "-c", probe], capture_output=True, env=env,
                           cwd="/", timeout=60)  # fmt: skip
    if not check.stdout.decode().startswith("True"):
        why = (check.stdout.decode() + check.stderr.decode()).strip()[-300:]
        pytest.skip(f"uid 65534 cannot run this interpreter, the library or a safe sandbox "
                    f"here (e.g. the interpreter lives under /root): {why}")  # fmt: skip
    done = subprocess.run([*drop, sys.executable, "-c", _AS_NOBODY, _KERNEL_SETTINGS,
                           _keys_code(), _FLOOD], capture_output=True, env=env, cwd="/",
                          timeout=120)  # fmt: skip
    out = done.stdout.decode()
    assert done.returncode == 0 and "code as uid 65534" in out, out + done.stderr.decode()
    assert "printk_ratelimit EROFS" in out and "add_key to session EPERM" in out, out
    assert "/dev/shm 64" in out and " DONE" not in out, out


@pytest.mark.slow  # default coverage: test_every_attempt_fails_inside_and_the_run_is_untouched
def test_rl_run_with_a_hostile_policy_keeps_its_checkpoints(tmp_path, monkeypatch):
    """A tool-use GRPO run whose policy is replaced by one that calls the python tool to delete
    the run directory and read its checkpoints: the run finishes, every checkpoint is intact
    and resumable, and those calls are scored as tool errors."""
    import json

    from jaxrl_llm.envs import tool_env
    from jaxrl_llm.runners import train
    from jaxrl_llm.stages import load_config

    workdir = tmp_path / "run"
    calls = [
        f"import shutil; shutil.rmtree({str(workdir)!r})",
        f"print(open({str(workdir / 'checkpoints' / '2' / 'x')!r}).read())",
        f"import os; print(os.listdir({str(workdir)!r}))",
    ]
    hostile = "".join(
        '<tool_call>{"name": "python", "arguments": ' + json.dumps({"code": code}) + "}</tool_call>"
        for code in calls
    )
    original_step = tool_env.ToolEnv.step

    def step(self, reply):  # the model's reply is replaced by the hostile calls, turn after turn
        return original_step(self, hostile if self.calls == 0 else reply)

    monkeypatch.setattr(tool_env.ToolEnv, "step", step)
    config = load_config(
        "experiments/configs/tool_calculator_tiny.py",
        {"env.tools": "calculator,python", "env.warmup_steps": 0, "env.warmup_demos": 0,
         "train.num_steps": 2, "train.checkpoint_every": 1, "eval.before": False,
         "eval.after": False},
    )  # fmt: skip
    summary = train(config, str(workdir), progress=False)
    assert summary["steps"] == 2
    checkpoints = sorted(os.listdir(workdir / "checkpoints"))
    assert checkpoints and (workdir / "config.json").exists()
    rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
    steps = [r for r in rows if "train/loss" in r]
    assert all(r["env/sandbox_level"] >= 2 and r["env/sandbox_seccomp"] == 1.0 for r in steps)
    # Every hostile call failed inside the sandbox: errors, no successful call.
    for r in steps:  # 8 episodes x 3 calls a step
        assert r["episode/tool/error"] >= 24, r  # the hostile first turns; later turns random
        assert r.get("episode/tool/ok", 0) == 0
    digest = _digest(workdir / "checkpoints")
    again = train(load_config("experiments/configs/tool_calculator_tiny.py", {
        "env.tools": "calculator,python", "env.warmup_steps": 0, "env.warmup_demos": 0,
        "train.num_steps": 2, "train.checkpoint_every": 1, "eval.before": False,
        "eval.after": False}), str(workdir), progress=False)  # fmt: skip
    assert again["steps"] == 2 and _digest(workdir / "checkpoints") == digest  # resumed, intact


def test_host_settings_keyrings_and_cgroups_are_unchanged(host_before):
    """The last test: after every call of the module the host's kernel settings, keyrings,
    sandbox cgroups and call directories are as they were."""
    assert_host_unchanged(host_before)
