"""Asynchronous against synchronous RL steps: measured phase times, idle times, and the model.

    python experiments/benchmarks/async_pipeline.py RUN_DIR [RUN_DIR ...]

Each RUN_DIR is a finished run of the asynchronous runner (metrics.jsonl with async/* keys),
e.g. one of `experiments/sweeps/async_staleness.py`. Printed:

1. Measured, per run: median generation, training and weight-sync seconds per step, and each
   side's idle share of the wall time. On a 2-core CPU both threads share the cores, so these
   are phase times, not a speed-up.
2. Predicted by `jaxrl_llm.runners.pipeline_model` from the first run's phase times: the
   asynchronous/synchronous speed-up for staleness k, the generator's share f of the devices,
   the decode scaling exponent alpha and a spread of generation times (lognormal, mean kept).
3. The model at the published settings of LlamaRL and AReaL, beside their reported speed-ups.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import numpy as np

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners.pipeline_model import Phases, best_split, speedup

FRACTIONS = tuple(i / 20 for i in range(1, 20))  # the generator's share of the devices


def label_of(workdir: str) -> str:
    """ "k=K correction" from the run's config.json."""
    with open(os.path.join(workdir, "config.json")) as f:
        config = json.load(f)
    return f"k={config['async_rl']['max_staleness']} {config['off_policy']['correction']}"


def phases_of(workdir: str) -> tuple[Phases, dict[str, float]]:
    """The run's per-step phase seconds and its measured idle shares."""
    rows = [r for r in read_metrics(workdir) if "async/version" in r]
    if not rows:
        raise SystemExit(f"{workdir}: no asynchronous steps in metrics.jsonl")
    generate = [r["time/rollout_s"] + r["time/reward_s"] for r in rows]
    train = [r["time/prepare_s"] + r["time/train_s"] for r in rows]
    sync = statistics.median(r.get("time/sync_s", 0.0) for r in rows)
    wall = sum(r["time/step_s"] for r in rows)
    measured = {
        "steps": len(rows),
        "generate_s": statistics.median(generate),
        "train_s": statistics.median(train),
        "sync_s": sync,
        "sync_mb": statistics.median(r.get("async/sync_bytes", 0.0) for r in rows) / 2**20,
        "learner_idle": sum(r["time/learner_idle_s"] for r in rows) / wall,
        "generator_idle": sum(r["time/generator_idle_s"] for r in rows) / wall,
    }
    return Phases(generate, train, sync), measured


def with_spread(phases: Phases, sigma: float, seed: int = 0) -> Phases:
    """Generation times multiplied by lognormal factors of mean 1 (a long tail of lengths)."""
    rng = np.random.default_rng(seed)
    factors = rng.lognormal(-(sigma**2) / 2, sigma, len(phases.generate))
    return phases._replace(generate=list(np.asarray(phases.generate) * factors))


def constant(generate: float, train: float, sync: float, steps: int = 200) -> Phases:
    return Phases([generate] * steps, [train] * steps, sync)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args(argv)

    print("## Measured (this machine)\n")
    print(
        "| run | steps | generate s | train s | sync s | sync MB | learner idle | generator idle |"
    )
    print("|---|---|---|---|---|---|---|---|")
    first = None
    for workdir in args.runs:
        phases, m = phases_of(workdir)
        first = first or phases
        print(
            f"| {label_of(workdir)} | {m['steps']} | {m['generate_s']:.1f} | {m['train_s']:.1f} | "
            f"{m['sync_s']:.3f} | {m['sync_mb']:.0f} | {100 * m['learner_idle']:.0f}% | "
            f"{100 * m['generator_idle']:.0f}% |"
        )

    g, t = statistics.median(first.generate), statistics.median(first.train)
    print(f"\n## Predicted from the first run's phases (generation {g / (g + t):.0%} of a step)\n")
    print("speed-up = synchronous wall time / asynchronous wall time, best generator share f\n")
    print("| alpha (decode) | spread sigma | k=0 | k=1 | k=2 | k=4 |")
    print("|---|---|---|---|---|---|")
    for alpha in (1.0, 0.5):
        for sigma in (0.0, 0.5, 1.0):
            phases = with_spread(first, sigma)
            cells = []
            for k in (0, 1, 2, 4):
                f, s = best_split(phases, FRACTIONS, max_staleness=k, alpha_generate=alpha)
                cells.append(f"{s:.2f}x (f={f:g})")
            print(f"| {alpha} | {sigma} | " + " | ".join(cells) + " |")

    print("\n## The model at published settings\n")
    print("| system | setting (assumed, not published phase times) | model | reported |")
    print("|---|---|---|---|")
    # AReaL (2505.24298): long chain-of-thought decoding dominates a synchronous step, lengths
    # up to 32k tokens with a long tail; interruptible generation streams past each batch's
    # longest completion; staleness 4. LlamaRL (2505.24034), 405B: one step off-policy.
    settings = [
        ("AReaL 1.5B-7B", 0.8, 0.5, 1.0, 4),
        ("AReaL 1.5B-7B", 0.8, 0.5, 2.0, 4),
        ("AReaL 1.5B-7B", 0.8, 0.5, 3.0, 4),
        ("LlamaRL 405B", 0.8, 0.5, 1.0, 1),
        ("LlamaRL 405B", 0.9, 0.3, 3.0, 1),
    ]
    for system, share, alpha, tail, k in settings:
        phases = constant(share, 1 - share, 0.01)
        f, s = best_split(phases, FRACTIONS, max_staleness=k, alpha_generate=alpha, tail_ratio=tail)
        reported = "2.27-2.77x" if system.startswith("AReaL") else "10.7x"
        print(
            f"| {system} | generation {share:.0%} of a synchronous step, decode alpha {alpha}, "
            f"tail ratio {tail:g}, k={k}, best f={f:g} | {s:.2f}x | {reported} |"
        )
    even = constant(0.5, 0.5, 0.0)
    ceiling = speedup(even, max_staleness=4, alpha_generate=0.0, alpha_train=0.0)
    print(
        f"\nCeiling of overlap alone (neither side slowed by the split, generation = training): "
        f"{ceiling:.2f}x. Beyond 2x needs a phase that gets cheaper per device on fewer devices "
        "(alpha < 1) or a synchronous baseline that wastes time the model does not contain."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
