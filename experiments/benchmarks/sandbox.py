"""Start-up cost of one Python sandbox call per isolation mode, measured in the same run.

    .venv/bin/python experiments/benchmarks/sandbox.py [--calls 30]

Times `run_python("print(1)")` (an interpreter start, `print`, exit, cleanup: what every "python"
tool call pays before the model's code does any work) under each isolation that works here:
"bubblewrap+cgroup" (the default where cgroups are writable), "bubblewrap+watchdog", and the
previous sandbox's "namespaces" (unshare user + network + pid) and "process group", which run
only with `unsafe=True`. Median and 90th percentile over `--calls` calls after one warm-up; the
ratio is against "namespaces", the isolation this sandbox replaced. The second line names the
user and seccomp filter the bubblewrap modes run under (`Isolation.describe()`).
"""

from __future__ import annotations

import argparse
import datetime
import os
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
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
