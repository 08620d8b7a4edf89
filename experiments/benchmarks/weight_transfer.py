"""Weight sync between a learner and a generator process, against a copy within one process.

    .venv/bin/python experiments/benchmarks/weight_transfer.py             # SmolLM2, 5 versions
    .venv/bin/python experiments/benchmarks/weight_transfer.py --tiny      # a tiny model

Two processes of one `jax.distributed` run on this machine, one CPU device each, exchange
weights through `jaxrl_llm.runners.remote_pipeline.RemotePipeline` exactly as a two-process
asynchronous run does (`config.async_rl.processes=2`): the learner (process 0) publishes
`--versions` successive copies of SmolLM2-135M-Instruct's weights (float32, 513 MiB); the
generator (process 1) waits for each version and pulls it into its own device buffers through
JAX's transfer server (TCP on CPU). Reported per version: the generator's pull seconds (the
transfer alone) and its whole wait (request, scheduling and pull). Beside it, in the learner
process: the seconds of `RolloutWorker.snapshot` (the one-process sync, a device-to-device copy
on the same device), the physical floor of a same-host move. The ratio says what leaving the
process costs here; on GPUs the transfer server uses the interconnect instead of TCP.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

RESULT = "RESULT "


def worker(args) -> None:
    """One process of the pair (JAX_PROCESS_ID picks the side)."""
    from jaxrl_llm import distributed

    distributed.initialize()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrl_llm.models import from_pretrained, init_model, tiny_config
    from jaxrl_llm.runners.remote_pipeline import RemotePipeline, weights_like

    if args.tiny:
        model = init_model(tiny_config(), seed=0)
    else:
        model, _ = from_pretrained("smollm2-135m-instruct")
    params = nnx.state(model, nnx.Param)
    device = jax.local_devices()[0]
    mesh = jax.sharding.Mesh(np.array([device]).reshape(1, 1), ("data", "model"))
    shardings = jax.tree.map(lambda _: NamedSharding(mesh, P()), params)
    params = jax.device_put(params, shardings)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(params))
    side = "learner" if jax.process_index() == 0 else "generator"
    like = weights_like(params, shardings) if side == "generator" else None
    pipeline = RemotePipeline(side=side, timeout_s=600, weights_like=like)
    result = {"side": side, "bytes": nbytes}
    if side == "learner":
        copies = []
        pipeline.send_start(0, {})
        for version in range(args.versions):  # one version at a time, as sync_every=1 does
            start = time.perf_counter()
            copy = jax.tree.map(jnp.copy, params)
            jax.block_until_ready(copy)
            copies.append(time.perf_counter() - start)
            pipeline.publish(version, copy)
            pipeline.drop_weights_below(version)
            pipeline.wait_flag(f"got/{version}")
        result["copy_s"] = copies
    else:
        pipeline.receive_start()
        waits, pulls = [], []
        for version in range(args.versions):
            before = pipeline.pull_seconds
            got, weights, waited = pipeline.weights(at_least=version, exact=True)
            assert got == version
            waits.append(waited)
            pulls.append(pipeline.pull_seconds - before)
            del weights
            pipeline.set_flag(f"got/{version}")
        result.update(wait_s=waits, pull_s=pulls)
    pipeline.close()
    print(RESULT + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=5)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("weight_transfer.py"), flush=True)
    if args.worker:
        return worker(args)

    from jaxrl_llm.distributed import free_port

    port = free_port()
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", f"--versions={args.versions}"]
    cmd += ["--tiny"] if args.tiny else []
    procs = [
        subprocess.Popen(
            cmd, env={**env, "JAX_PROCESS_ID": str(i)}, stdout=subprocess.PIPE, text=True
        )
        for i in range(2)
    ]
    results = {}
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            sys.exit(f"a worker failed (exit {proc.returncode})")
        line = next(x for x in out.splitlines() if x.startswith(RESULT))
        result = json.loads(line[len(RESULT) :])
        results[result["side"]] = result
    learner, generator = results["learner"], results["generator"]
    mib = learner["bytes"] / 2**20
    copy = min(learner["copy_s"])
    print(
        f"\nWeight sync, {'tiny model' if args.tiny else 'SmolLM2-135M-Instruct'} float32 "
        f"({mib:.0f} MiB), 2 processes x 1 CPU device, {time.strftime('%Y-%m-%d')}\n"
    )
    print("| version | pull s | wait s | pull GiB/s | in-process copy s | pull / copy |")
    print("|---|---|---|---|---|---|")
    for v, (pull, wait) in enumerate(zip(generator["pull_s"], generator["wait_s"], strict=True)):
        rate = learner["bytes"] / 2**30 / pull
        print(f"| {v} | {pull:.3f} | {wait:.3f} | {rate:.2f} | {copy:.3f} | {pull / copy:.1f}x |")
    print(
        "\npull: the transfer server moving every leaf into the generator's buffers; wait: the "
        "generator's whole `weights()` call (key-value polling, the learner scheduling the "
        "pull, the pull); in-process copy: the best of the learner's device copies of the same "
        "tree (the one-process sync)."
    )


if __name__ == "__main__":
    main()
