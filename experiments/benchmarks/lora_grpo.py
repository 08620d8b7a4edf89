"""GRPO with LoRA adapters against full fine-tuning, at equal wall time, on the main job.

    python experiments/benchmarks/lora_grpo.py --time_s 420 --workdir runs/lora_bench

Runs the main job (SmolLM2-135M-Instruct, chain_sum) twice as child processes, one after the
other and each with the same `train.max_time_s`: full fine-tuning (the default learning rate)
and LoRA (rank, alpha and learning rate below; every projection adapted). For each it reports
held-out greedy accuracy before and after, the RL steps done within the budget, seconds per step
(evaluations excluded), the peak resident memory of the child process (`wait4`'s ru_maxrss:
weights, optimizer state, activations and the compiled programs together), and the bytes a
weight sync sends to a rollout on other devices (`sync/payload_bytes`: every weight, or the
adapters alone). The last column is the LoRA/full ratio, measured in the same invocation.
`--skip_runs` prints the table of existing run directories.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# The main job before its "stable" recipe, which RESULTS.md's LoRA figures were measured with.
CONFIG = "experiments/configs/grpo_smollm2.py:plain"


def run(workdir: str, time_s: int, flags: list[str]) -> dict:
    """Runs the main job into `workdir` (skipped when it already finished) and returns the
    child's peak RSS in MiB and its wall seconds (None when skipped)."""
    if os.path.exists(os.path.join(workdir, "summary.json")):
        return _load(os.path.join(workdir, "bench_process.json"), default={})
    cmd = [sys.executable, "-m", "jaxrl_llm.main", "--config", CONFIG, "--workdir", workdir]
    cmd += ["--no_progress", f"--config.train.max_time_s={time_s}", *flags]
    start = time.time()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (status {status})")
    process = {"peak_rss_mib": usage.ru_maxrss / 1024, "wall_s": time.time() - start}
    with open(os.path.join(workdir, "bench_process.json"), "w") as f:
        json.dump(process, f)
    return process


def _load(path: str, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def _metrics(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def figures(workdir: str, process: dict) -> dict:
    """The table's figures of one finished run."""
    summary = _load(os.path.join(workdir, "summary.json"))
    rows = [r for r in _metrics(workdir) if "train/rows" in r]
    step_s = [r["time/step_s"] for r in rows[1:]]  # step 1 compiles
    return {
        "accuracy before": 100 * summary["eval_before"]["accuracy"],
        "accuracy after": 100 * summary["eval_after"]["accuracy"],
        "steps in budget": summary["steps"],
        "seconds per step (after the first)": sum(step_s) / max(len(step_s), 1),
        "peak RSS (MiB)": process.get("peak_rss_mib", float("nan")),
        "weight sync payload (MiB)": rows[-1]["sync/payload_bytes"] / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time_s", type=int, default=420, help="train.max_time_s of each run")
    parser.add_argument("--workdir", default="runs/lora_bench")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--lora_lr", type=float, default=3e-4)
    parser.add_argument("--skip_runs", action="store_true")
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("lora_grpo.py"), flush=True)
    lora_flags = [
        f"--config.model.lora.rank={args.rank}",
        f"--config.model.lora.alpha={args.alpha}",
        f"--config.optimizer.learning_rate={args.lora_lr}",
    ]
    results = {}
    for name, flags in (("full", []), ("lora", lora_flags)):
        workdir = os.path.join(args.workdir, name)
        if args.skip_runs:
            process = _load(os.path.join(workdir, "bench_process.json"), default={})
        else:
            process = run(workdir, args.time_s, flags)
        results[name] = figures(workdir, process)
    print(
        f"\nGRPO on SmolLM2-135M-Instruct / chain_sum, {args.time_s} s of training each; LoRA "
        f"rank {args.rank}, alpha {args.alpha}, lr {args.lora_lr} (full: the config's lr)\n"
    )
    print("| figure | full fine-tuning | LoRA | LoRA / full |")
    print("| --- | --- | --- | --- |")
    for key in results["full"]:
        full, lora = results["full"][key], results["lora"][key]
        ratio = f"{lora / full:.3f}" if full else "-"
        print(f"| {key} | {full:.4g} | {lora:.4g} | {ratio} |")


if __name__ == "__main__":
    main()
