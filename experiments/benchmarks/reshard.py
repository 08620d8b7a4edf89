"""Benchmark: `reshard` train -> decode layout vs a plain device-to-device copy of the same bytes.

For each model, on a (data=2, model=4) mesh of 8 devices (fake CPU devices unless a platform
with 8 devices is present):
  reshard cold / warm   train -> decode with donation (cold includes compiling the moves), and
                        decode -> train (warm);
  d2d copy              `jax.device_put`, array by array, of the decode-layout tree onto the
                        same mesh with its devices rotated by one: the same bytes, each buffer
                        copied whole to another device (checked under `no_host_transfers`);
  ratio                 reshard warm / d2d copy;
  naive device_put      `jax.device_put(train_tree, decode_shardings)`: JAX gathers mismatched
                        blocks through the host (not allowed under the guard);
  peak                  peak of live device bytes during a train -> decode reshard (separate,
                        untimed run) over max(train, decode) footprint, and the logical peak over
                        the parameter bytes.

Usage:
  python experiments/benchmarks/reshard.py                      # SmolLM2-135M and a 1.1B config
  python experiments/benchmarks/reshard.py --models smollm2 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import time


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2,1b", help="comma list: smollm2, 1b, tiny")
    parser.add_argument("--devices", type=int, default=8, help="fake CPU devices when on CPU")
    parser.add_argument("--repeats", type=int, default=2, help="warm repetitions (min is kept)")
    parser.add_argument("--dtype-1b", default="bfloat16", help="dtype of the 1B config")
    return parser.parse_args()


def _one_b_config(dtype: str):
    from jaxrl_llm.models import ModelConfig

    return ModelConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=8192,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        tie_word_embeddings=False,
        dtype=dtype,
    )


def _rotated(shardings, mesh):
    """The same specs on a mesh whose devices are rolled by one position."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding

    devices = np.roll(mesh.devices.flatten(), 1).reshape(mesh.devices.shape)
    other = Mesh(devices, mesh.axis_names, axis_types=mesh.axis_types)
    return jax.tree.map(
        lambda s: NamedSharding(other, s.spec),
        shardings,
        is_leaf=lambda s: isinstance(s, NamedSharding),
    )


def run_model(name: str, build, mesh, repeats: int) -> dict:
    """Times reshard and the baselines for the model `build(mesh)` returns in train layout."""
    import jax
    from flax import nnx

    from jaxrl_llm.sharding import (
        DECODE_RULES,
        TRAIN_RULES,
        device_bytes,
        no_host_transfers,
        param_shardings,
        reshard,
    )

    start = time.perf_counter()
    model = build(mesh)
    graphdef, state = nnx.split(model)
    del model
    jax.block_until_ready(state)
    build_s = time.perf_counter() - start
    train = param_shardings(state, mesh, TRAIN_RULES)
    decode = param_shardings(state, mesh, DECODE_RULES)
    leaves = jax.tree.leaves(state)
    param_bytes = sum(x.nbytes for x in leaves)
    train_device = sum(device_bytes(x) for x in leaves)
    decode_list = jax.tree.leaves(decode, is_leaf=lambda s: hasattr(s, "spec"))
    decode_device = sum(device_bytes(x, s) for x, s in zip(leaves, decode_list, strict=True))
    del leaves

    state, cold = reshard(state, decode, donate=True)
    state, back_cold = reshard(state, train, donate=True)
    warm, back = [], []
    for _ in range(repeats):
        state, stats = reshard(state, decode, donate=True)
        warm.append(stats.seconds)
        state, stats = reshard(state, train, donate=True)
        back.append(stats.seconds)

    # Peak memory, untimed (sampling jax.live_arrays costs time).
    state, peak = reshard(state, decode, donate=True, measure_peak=True)

    # Baseline 1: whole-buffer device-to-device copies of the decode-layout bytes, one array at a
    # time like reshard. (One device_put of the whole tree deadlocked XLA's CPU collective-permute
    # rendezvous with ~300 arrays of 5 MB on 8 fake devices, aborting the process; jax 0.10.2.)
    rotated = jax.tree.leaves(_rotated(decode, mesh), is_leaf=lambda s: hasattr(s, "spec"))
    copy_s = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        with no_host_transfers():
            for x, s in zip(jax.tree.leaves(state), rotated, strict=True):
                jax.device_put(x, s).block_until_ready()
        copy_s.append(time.perf_counter() - t)
    state, _ = reshard(state, train, donate=True)

    # Baseline 2: plain device_put between the layouts, array by array (mismatched blocks are
    # gathered through the host by JAX; not allowed under the guard).
    decode_leaves = jax.tree.leaves(decode, is_leaf=lambda s: hasattr(s, "spec"))
    t = time.perf_counter()
    for x, s in zip(jax.tree.leaves(state), decode_leaves, strict=True):
        jax.device_put(x, s).block_until_ready()
    naive_s = time.perf_counter() - t
    del state, graphdef

    return {
        "model": name,
        "param_MB": param_bytes / 1e6,
        "train_MB": train_device / 1e6,
        "decode_MB": decode_device / 1e6,
        "build_s": build_s,
        "cold_s": cold.seconds,
        "warm_s": min(warm),
        "back_cold_s": back_cold.seconds,
        "back_s": min(back),
        "copy_s": min(copy_s[1:]),
        "naive_s": naive_s,
        "peak_device": peak.peak_live_device_bytes / max(train_device, decode_device),
        "peak_logical": peak.peak_live_bytes / param_bytes,
        "arrays": cold.num_arrays,
    }


def main() -> None:
    args = _parse()
    from machine import benchmark_header

    print(benchmark_header("reshard.py"), flush=True)
    flag = f"--xla_force_host_platform_device_count={args.devices}"
    if "host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()

    import jax
    import jax.numpy as jnp

    from jaxrl_llm.models import from_pretrained, tiny_config
    from jaxrl_llm.sharding import TRAIN_RULES, init_sharded, make_mesh, shard_model

    mesh = make_mesh((2, 4), ("data", "model"), devices=jax.devices()[:8])
    builders = {
        "smollm2": (
            "SmolLM2-135M f32",
            lambda m: shard_model(
                from_pretrained(dtype=jnp.float32)[0], m, TRAIN_RULES, donate=True
            ),
        ),
        "tiny": ("tiny (smoke test)", lambda m: init_sharded(tiny_config(), m, TRAIN_RULES)),
        "1b": (
            f"1.1B random {args.dtype_1b}",
            lambda m: init_sharded(_one_b_config(args.dtype_1b), m, TRAIN_RULES),
        ),
    }
    rows = []
    for key in args.models.split(","):
        name, build = builders[key]
        rows.append(run_model(name, build, mesh, args.repeats))
        print(f"done {name}: {rows[-1]}", flush=True)

    print(
        f"\njax {jax.__version__}, {jax.device_count()} x {jax.devices()[0].platform}, "
        f"mesh (data=2, model=4), min of {args.repeats} warm runs"
    )
    header = (
        "| model | arrays | params MB | train / decode MB on devices | reshard cold s | "
        "reshard warm s | decode->train warm s | d2d copy s | ratio | naive device_put s | "
        "peak dev / peak logical |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for r in rows:
        print(
            f"| {r['model']} | {r['arrays']} | {r['param_MB']:.0f} | "
            f"{r['train_MB']:.0f} / {r['decode_MB']:.0f} | {r['cold_s']:.2f} | {r['warm_s']:.2f} | "
            f"{r['back_s']:.2f} | {r['copy_s']:.2f} | {r['warm_s'] / r['copy_s']:.1f}x | "
            f"{r['naive_s']:.2f} | {r['peak_device']:.3f} / {r['peak_logical']:.3f} |"
        )


if __name__ == "__main__":
    main()
