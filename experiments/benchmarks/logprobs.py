"""Benchmark: fused token log-probs (blocked XLA path) against naive full logits, and tokamax.

What it measures, per variant and mode (forward; forward + backward), each in a fresh
subprocess so that one variant's buffers cannot hide in another's peak:

- compiled memory: ``jax.jit(f).lower(...).compile().memory_analysis()``; "temp" is XLA's scratch
  for the program, "peak" = arguments + outputs + temp - aliased (what the program needs at once);
- measured RSS: after the inputs are built and the program compiled, the worker resets the
  kernel's peak-RSS counter (``/proc/self/clear_refs``) and reads the peak (``VmHWM``) after its
  runs; "run RSS" is that peak minus the RSS just before the runs, i.e. what executing the
  program added. The whole-process peak (``ru_maxrss``: imports, inputs, compilation) is shown
  too;
- time: best of ``--reps`` runs after one warm-up (compile excluded), wall clock and process CPU
  time (CPU time is the steadier number on a machine whose cores are shared).

Variants:

- ``naive``: ``[N, V]`` float32 logits, ``log_softmax``, gather, entropy; ``jax.grad`` backward;
- ``xla``: ``token_logprobs(implementation="xla")``, the blocked path (default blocks);
- ``tokamax``: ``tokamax.linear_softmax_cross_entropy_loss(implementation="xla")``, the peer (its
  only CPU implementation; it materialises the logits too, and returns a summed loss: no
  per-token log-probs, no entropy). Skipped when tokamax is not installed.

The forward+backward loss is ``sum(logp) + 0.01 * sum(entropy)`` (tokamax: its summed loss),
differentiated with respect to both the hidden states and the unembedding.

Usage::

    python experiments/benchmarks/logprobs.py            # B*T = 8192, D = 576, V = 49152
    python experiments/benchmarks/logprobs.py --quick    # small smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

VARIANTS = ("naive", "xla", "tokamax")
MODES = ("fwd", "fwd+bwd")


def _inputs(tokens: int, d: int, v: int):
    """float32 inputs, generated in numpy straight into their final dtype (no big temporaries)."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((8, tokens // 8, d), dtype=np.float32)
    unembed = rng.standard_normal((d, v), dtype=np.float32)
    unembed *= 0.05
    targets = rng.integers(0, v, (8, tokens // 8), dtype=np.int32)
    return jnp.array(hidden), jnp.array(unembed), jnp.array(targets)


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def _function(variant: str, mode: str, targets):
    import jax

    if variant == "tokamax":
        import tokamax

        # tokamax reads its absl flags from sys.argv on first use and rejects ours.
        sys.argv = sys.argv[:1]

        def forward(h, w):
            return tokamax.linear_softmax_cross_entropy_loss(
                h.reshape(-1, h.shape[-1]), targets.reshape(-1), w, implementation="xla"
            )

        loss = forward
    else:
        from kernels.logprobs import token_logprobs

        def forward(h, w):
            return token_logprobs(h, w, targets, implementation=variant)

        def loss(h, w):
            logp, ent = forward(h, w)
            return logp.sum() + 0.01 * ent.sum()

    return jax.jit(forward if mode == "fwd" else jax.grad(loss, argnums=(0, 1)))


def worker(variant: str, mode: str, tokens: int, d: int, v: int, reps: int) -> dict:
    """Runs one variant in this process; returns its measurements."""
    import gc

    import jax

    hidden, unembed, targets = _inputs(tokens, d, v)
    compiled = _function(variant, mode, targets).lower(hidden, unembed).compile()
    mem = compiled.memory_analysis()
    gc.collect()
    rss_before = _status_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS (Linux >= 4.0)
    jax.block_until_ready(compiled(hidden, unembed))  # warm-up
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(compiled(hidden, unembed))
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    mib = 1 / 2**20
    return {
        "temp_mib": mem.temp_size_in_bytes * mib,
        "peak_mib": (
            mem.argument_size_in_bytes
            + mem.output_size_in_bytes
            + mem.temp_size_in_bytes
            - mem.alias_size_in_bytes
        )
        * mib,
        "run_rss_mib": _status_mib("VmHWM") - rss_before,
        "process_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "wall_s": min(wall),
        "cpu_s": min(cpu),
    }


def _run_worker(variant, mode, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", variant, "--mode", mode]
    cmd += ["--tokens", str(args.tokens), "--d", str(args.d), "--v", str(args.v)]
    cmd += ["--reps", str(args.reps)]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{variant} {mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="B*T=1024, D=64, V=4096, 1 rep")
    parser.add_argument("--tokens", type=int, default=8192, help="B*T (B = 8)")
    parser.add_argument("--d", type=int, default=576)
    parser.add_argument("--v", type=int, default=49152)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, default="fwd", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("logprobs.py"), flush=True)
    if args.quick:
        args.tokens, args.d, args.v, args.reps = 1024, 64, 4096, 1
    if args.worker:
        print(json.dumps(worker(args.worker, args.mode, args.tokens, args.d, args.v, args.reps)))
        return

    try:
        import tokamax  # noqa: F401

        variants = VARIANTS
    except ImportError:
        variants = ("naive", "xla")
        print("tokamax is not installed: the peer is skipped")

    import jax

    print(
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}, {os.cpu_count()} cores; "
        f"B*T={args.tokens} D={args.d} V={args.v} float32, best of {args.reps}"
    )
    header = (
        "| mode | variant | XLA temp MiB | XLA peak MiB | run RSS MiB | process peak RSS MiB "
        "| wall s | CPU s | XLA peak / naive | run RSS / naive | wall / naive | CPU / naive |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for mode in MODES:
        results = {}
        for variant in variants:
            r = results[variant] = _run_worker(variant, mode, args)
            n = results["naive"]
            print(
                f"| {mode} | {variant} | {r['temp_mib']:.0f} | {r['peak_mib']:.0f} "
                f"| {r['run_rss_mib']:.0f} | {r['process_rss_mib']:.0f} | {r['wall_s']:.2f} "
                f"| {r['cpu_s']:.2f} | {r['peak_mib'] / n['peak_mib']:.3f} "
                f"| {r['run_rss_mib'] / n['run_rss_mib']:.3f} | {r['wall_s'] / n['wall_s']:.2f} "
                f"| {r['cpu_s'] / n['cpu_s']:.2f} |",
                flush=True,
            )
    print(
        "targets for xla vs naive: peak memory <= 0.125 x naive, time <= 1.3 x naive "
        "(forward and forward+backward)"
    )


if __name__ == "__main__":
    main()
