"""Decode throughput on a GPU against the HBM roofline (a SmolLM2-135M-shaped random model).

    python experiments/benchmarks/decode_gpu.py          # on a machine with a CUDA GPU

`Generator` (the one-program decode) on a random model with SmolLM2-135M-Instruct's shape (30
layers, D 576, 9 heads / 3 KV heads, MLP 1536, vocabulary 49152, tied embeddings) in bfloat16:
B prompts of 64 tokens, exactly 128 new tokens each (EOS off), temperature 1. New tokens per
second = B x 128 / wall time of one call (prefill included, compile excluded, best of 3). The
roofline: a decode step reads every weight once plus each row's KV cache so far, at the HBM
bandwidth given by `--hbm_tb_s` (H200: 4.8 TB/s); its step time is bytes / bandwidth, and the
table gives our step time as a multiple of it.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from flax import nnx

from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.rollout import GenerationConfig, Generator

PROMPT, NEW = 64, 128


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 128, 512])
    parser.add_argument("--hbm_tb_s", type=float, default=4.8)
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("decode_gpu.py"), flush=True)
    config = tiny_config(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
        num_kv_heads=3, head_dim=64, tie_word_embeddings=True, max_position_embeddings=2048,
        dtype="bfloat16",
    )  # fmt: skip
    model = init_model(config, seed=0)
    params = nnx.state(model, nnx.Param)
    weight_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    kv_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2  # bf16
    device = jax.devices()[0]
    print(
        f"device: {device.device_kind}, jax {jax.__version__}, weights {weight_bytes / 2**20:.0f} MiB"
    )
    print("| batch | new tok/s | ms / step | roofline ms / step | vs roofline |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for batch in args.batches:
        prompts = [rng.integers(1, 49000, PROMPT).tolist() for _ in range(batch)]
        gen = Generator(model, GenerationConfig(max_new_tokens=NEW, temperature=1.0, eos_ids=()))
        jax.block_until_ready(gen(prompts, seed=0).tokens)  # compile
        best = float("inf")
        for rep in range(3):
            start = time.perf_counter()
            jax.block_until_ready(gen(prompts, seed=rep).tokens)
            best = min(best, time.perf_counter() - start)
        step = best / NEW
        mean_context = PROMPT + NEW / 2
        bytes_per_step = weight_bytes + batch * mean_context * kv_per_token
        floor = bytes_per_step / (args.hbm_tb_s * 1e12)
        print(
            f"| {batch} | {batch * NEW / best:,.0f} | {1e3 * step:.2f} | {1e3 * floor:.3f} | "
            f"{step / floor:.1f}x |"
        )


if __name__ == "__main__":
    main()
