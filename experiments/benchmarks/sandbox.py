"""Start-up cost of one Python sandbox call per isolation mode, measured in the same run.

    .venv/bin/python experiments/benchmarks/sandbox.py [--calls 30]
    .venv/bin/python experiments/benchmarks/sandbox.py --ab BASE_DIR [--calls 100]

Times `run_python("print(1)")` (an interpreter start, `print`, exit, cleanup: what every "python"
tool call pays before the model's code does any work) under each isolation that works here:
"bubblewrap+cgroup" (the default where cgroups are writable), "bubblewrap+watchdog", and the
previous sandbox's "namespaces" (unshare user + network + pid) and "process group", which run
only with `unsafe=True`. Median and 90th percentile over `--calls` calls after one warm-up; the
ratio is against "namespaces", the isolation this sandbox replaced. The second line names the
user and seccomp filter the bubblewrap modes run under (`Isolation.describe()`).

`--ab BASE_DIR` compares two versions of the library on this machine at once: BASE_DIR is
another checkout's root (e.g. `git archive main jaxrl_llm | tar -x -C /tmp/sandbox-base`), this
checkout is "new". Each side runs in a long-lived worker process; they take turns five calls
at a time (which side goes first alternates), `--calls` calls each per bubblewrap mechanism, so
a load that comes and goes falls on both alike. Reported per side: median and 90th percentile
ms, and CPU ms per call (the library process and the sandboxed tree it reaped).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_description  # noqa: E402

from jaxrl_llm.envs import sandbox_isolation  # noqa: E402
from jaxrl_llm.envs.sandbox import run_python  # noqa: E402
from jaxrl_llm.envs.sandbox_isolation import Isolation  # noqa: E402


def modes() -> dict[str, Isolation]:
    """The isolations to time: the detected one and the others this machine can run."""
    found = sandbox_isolation.isolation()
    out = {}
    if found.safe:
        out["bubblewrap+cgroup"] = found._replace(mode="bubblewrap+cgroup")
        out["bubblewrap+watchdog"] = found._replace(mode="bubblewrap+watchdog")
    unshare = ("unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child")
    out["namespaces"] = Isolation("namespaces", unshare=unshare)
    out["process group"] = Isolation("process group")
    return out


# One side of the A/B: imports jaxrl_llm from sys.argv[1]; for each "MODE N" line on stdin,
# runs N calls under that mechanism and answers one JSON line of per-call ms and CPU ms.
_WORKER = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from jaxrl_llm.envs import sandbox_isolation
from jaxrl_llm.envs.sandbox import run_python
found = sandbox_isolation.isolation()
assert found.safe, found.describe()
print(json.dumps(found.describe()), flush=True)
def cpu_ms():
    return 1e3 * sum(u.ru_utime + u.ru_stime for u in
                     map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
for line in sys.stdin:
    mode, calls = line.split()
    sandbox_isolation.isolation = lambda: found._replace(mode=mode)
    ms, cpu = [], cpu_ms()
    for _ in range(int(calls)):
        start = time.perf_counter()
        assert run_python("print(1)").stdout == "1\\n"
        ms.append(1e3 * (time.perf_counter() - start))
    print(json.dumps({"ms": ms, "cpu_ms": (cpu_ms() - cpu) / int(calls)}), flush=True)
"""


def ab(base_dir: str, calls: int, *, turn: int = 5) -> None:
    """The interleaved A/B of `base_dir`'s library against this checkout's (module docstring)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sides = {"base": os.path.abspath(base_dir), "new": root}
    workers = {name: subprocess.Popen([sys.executable, "-c", _WORKER, path], cwd="/",
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for name, path in sides.items()}  # fmt: skip
    for name, worker in workers.items():
        print(f"# {name} ({sides[name]}): {json.loads(worker.stdout.readline())}")
    mechanisms = ["bubblewrap+cgroup", "bubblewrap+watchdog"]
    if not sandbox_isolation.cgroups_work():
        mechanisms = mechanisms[1:]
    results = {(m, name): {"ms": [], "cpu_ms": []} for m in mechanisms for name in sides}
    for mechanism in mechanisms:
        for name in sides:  # one warm-up call each
            workers[name].stdin.write(f"{mechanism} 1\n")
            workers[name].stdin.flush()
            workers[name].stdout.readline()
        for turn_index in range(calls // turn):
            order = list(sides) if turn_index % 2 == 0 else list(sides)[::-1]
            for name in order:
                workers[name].stdin.write(f"{mechanism} {turn}\n")
                workers[name].stdin.flush()
                answer = json.loads(workers[name].stdout.readline())
                results[mechanism, name]["ms"] += answer["ms"]
                results[mechanism, name]["cpu_ms"].append(answer["cpu_ms"])
    for worker in workers.values():
        worker.stdin.close()
        worker.wait()
    print("| mechanism | side | calls | median ms | p90 ms | CPU ms per call | new / base |")
    print("|---|---|---|---|---|---|---|")
    for mechanism in mechanisms:
        base = np.median(results[mechanism, "base"]["ms"])
        for name in sides:
            ms, cpu = (np.asarray(results[mechanism, name][k]) for k in ("ms", "cpu_ms"))
            print(f"| {mechanism} | {name} | {len(ms)} | {np.median(ms):.1f} | "
                  f"{np.percentile(ms, 90):.1f} | {cpu.mean():.1f} | "
                  f"{np.median(ms) / base:.3f} |")  # fmt: skip
    for mechanism in mechanisms:  # turn by turn: each new turn against the base turn beside it
        turns = {n: np.asarray(results[mechanism, n]["ms"]).reshape(-1, turn) for n in sides}
        ratios = np.median(turns["new"], axis=1) / np.median(turns["base"], axis=1)
        low, mid, high = np.percentile(ratios, [25, 50, 75])
        print(
            f"# {mechanism}: new / base turn by turn, median {mid:.3f} "
            f"(quartiles {low:.3f}, {high:.3f}) over {len(ratios)} turns"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--ab", metavar="BASE_DIR", default="",
                        help="interleaved A/B against another checkout's library")  # fmt: skip
    args = parser.parse_args()
    if args.calls < 1:
        parser.error(f"--calls={args.calls} must be >= 1.")
    if args.ab:
        if not os.path.isdir(os.path.join(args.ab, "jaxrl_llm")):
            parser.error(f"--ab={args.ab!r} holds no jaxrl_llm package: pass a checkout's root "
                         "(git archive main jaxrl_llm | tar -x -C DIR).")  # fmt: skip
        print(f"# sandbox A/B per call; {datetime.date.today()}; {cpu_description()}")
        ab(args.ab, args.calls)
        return
    print(f"# sandbox start-up per call; {datetime.date.today()}; {cpu_description()}")
    print(f"# {sandbox_isolation.isolation().describe()}")
    print("| isolation | median ms | p90 ms | vs namespaces |")
    print("|---|---|---|---|")
    results = {}
    for name, mode in modes().items():
        sandbox_isolation.isolation = lambda mode=mode: mode  # the mode under test
        if mode.mode == "bubblewrap+cgroup" and not sandbox_isolation.cgroups_work():
            continue
        run_python("print(1)", unsafe=True)  # warm-up
        seconds = []
        for _ in range(args.calls):
            start = time.perf_counter()
            result = run_python("print(1)", unsafe=True)
            seconds.append(time.perf_counter() - start)
            assert result.status == "ok", (name, result)
        results[name] = np.asarray(seconds) * 1e3
    base = np.median(results["namespaces"])
    for name, ms in results.items():
        print(f"| {name} | {np.median(ms):.1f} | {np.percentile(ms, 90):.1f} | "
              f"{np.median(ms) / base:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
