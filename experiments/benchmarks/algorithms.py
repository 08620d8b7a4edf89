"""GRPO, PPO, REINFORCE++ and ReMax on the main job's model and task, at equal training wall time.

    python experiments/benchmarks/algorithms.py --out runs/algorithms --train_seconds 360

Each algorithm runs as its own process (`python -m jaxrl_llm.main --config
experiments/configs/<name>_smollm2.py`) with `train.max_time_s` as the budget of its training
loop (compilation included; the evaluations before and after are outside it), one after the
other on the same machine. The table gives held-out greedy accuracy before and after (200
prompts), steps done, median seconds per step after the first (the first compiles), and the
process's peak RSS; the comparison is between rows of one run, on one machine. Learning curves of
all four go to `OUT/plots/` (`jaxrl_llm.plots`). The JAX compilation cache is off, so every
algorithm pays its own compilation inside its budget.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALGORITHMS = ("grpo", "ppo", "reinforce_pp", "remax")


def run_one(name: str, out: str, train_seconds: float, extra: list[str]) -> dict:
    workdir = os.path.join(out, name)
    cmd = [
        sys.executable, "-m", "jaxrl_llm.main",
        "--config", os.path.join(ROOT, "experiments", "configs", f"{name}_smollm2.py"),
        "--workdir", workdir, "--no_progress", "--compilation_cache=",
        "--config.train.num_steps=1000", f"--config.train.max_time_s={train_seconds}",
        *extra,
    ]  # fmt: skip
    t0 = time.time()
    # A fresh child per algorithm: RUSAGE_CHILDREN's max RSS is the largest child so far, so
    # read it from a wrapper process that runs exactly one algorithm.
    wrapper = (
        "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
        "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
        "sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, *cmd], cwd=ROOT, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    peak_kb = int(proc.stdout.rsplit("PEAK_RSS_KB", 1)[1].split()[0])
    summary = json.load(open(os.path.join(workdir, "summary.json")))
    rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    step_s = [r["time/step_s"] for r in rows if "time/step_s" in r]
    return dict(
        algorithm=name,
        before=summary["eval_before"]["accuracy"],
        after=summary["eval_after"]["accuracy"],
        steps=summary["steps"],
        train_s=summary["train_time_s"],
        first_step_s=step_s[0] if step_s else float("nan"),
        step_s=float(np.median(step_s[1:])) if len(step_s) > 1 else float("nan"),
        peak_gb=peak_kb / 2**20,
        wall_s=time.time() - t0,
        command=" ".join(cmd[2:]).replace(ROOT + "/", ""),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/algorithms")
    parser.add_argument("--train_seconds", type=float, default=360.0)
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--set", action="append", default=[], help="extra --config.X=V flags")
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("algorithms.py"), flush=True)
    os.makedirs(args.out, exist_ok=True)
    results = []
    for name in args.algorithms.split(","):
        result = run_one(name, args.out, args.train_seconds, [f"--config.{s}" for s in args.set])
        results.append(result)
        print(json.dumps(result), flush=True)
    json.dump(results, open(os.path.join(args.out, "results.json"), "w"), indent=2)
    print(
        f"\nEqual training budget {args.train_seconds:.0f} s per algorithm (compilation included); "
        "held-out greedy accuracy on 200 chain_sum prompts.\n"
    )
    print(
        "| algorithm | accuracy before | accuracy after | gain | steps | s/step (median, after the first) | first step s | peak RSS GB |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['algorithm']} | {100 * r['before']:.1f}% | {100 * r['after']:.1f}% | "
            f"{100 * (r['after'] - r['before']):+.1f} | {r['steps']} | {r['step_s']:.1f} | "
            f"{r['first_step_s']:.0f} | {r['peak_gb']:.1f} |"
        )
    from jaxrl_llm import plots

    plots.plot_runs(
        {r["algorithm"]: os.path.join(args.out, r["algorithm"]) for r in results},
        os.path.join(args.out, "plots"),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
