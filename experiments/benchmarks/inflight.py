"""What in-flight weight updates cost the decode: chunked decoding against the one-program decode.

    .venv/bin/python experiments/benchmarks/inflight.py                 # 32 rows, 128 new tokens
    .venv/bin/python experiments/benchmarks/inflight.py --quick         # 8 rows, 32 new tokens

PipelineRL-style in-flight updates (`jaxrl_llm.rollout.inflight`) split the rollout into a
prefill program and programs of at most `chunk` decode steps, with a host round trip between
chunks to ask for newer weights. This measures that price on SmolLM2-135M-Instruct (float32):
B different prompts of 64 tokens, sampled at temperature 1 for exactly N new tokens (EOS
disabled, compaction on), by `Generator.generate_with_work` (the whole decode in one
`lax.while_loop` program) and by `generate_inflight` with one weight version and chunks of 1, 8,
32 and N steps. Each call is timed after a compile call; the calls are interleaved over
`--repeats` rounds and the best of each is kept (this machine is shared and noisy). The table
gives the wall time of each against the one-program decode (a ratio) and checks that the tokens
are the same (they must be: same keys, same weights).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import jax
import numpy as np
from flax import nnx

from jaxrl_llm.models import from_pretrained
from jaxrl_llm.rollout import GenerationConfig, Generator
from jaxrl_llm.rollout.inflight import generate_inflight

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode import make_prompts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="8 rows, 32 new tokens, 2 rounds")
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("inflight.py"), flush=True)
    if args.quick:
        args.batch, args.new_tokens, args.repeats = 8, 32, 2
    chunks = sorted(set(args.chunks) | {args.new_tokens})

    model, tokenizer = from_pretrained("smollm2-135m-instruct")
    prompts = make_prompts(tokenizer, args.batch, 64)
    config = GenerationConfig(max_new_tokens=args.new_tokens, temperature=1.0, eos_ids=())
    generator = Generator(model, config)
    params = nnx.state(model)

    def one_program():
        rollout, _ = generator.generate_with_work(prompts, seed=0)
        return jax.device_get(rollout.tokens)

    def chunked(chunk):
        def run():
            out = generate_inflight(
                generator, prompts, seed=0, weights=lambda: (0, params), chunk_tokens=chunk
            )
            return np.asarray(out.rollout.tokens)

        return run

    runs = {"one program": one_program, **{f"chunks of {c}": chunked(c) for c in chunks}}
    reference = one_program()  # compiles
    same = {name: bool(np.array_equal(run(), reference)) for name, run in runs.items()}  # compile
    best = {name: float("inf") for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)

    base = best["one program"]
    print(
        f"\nIn-flight decode cost, SmolLM2-135M-Instruct float32, {args.batch} rows x 64 prompt "
        f"tokens, {args.new_tokens} new tokens, {platform.machine()} "
        f"{os.cpu_count()} cores, jax {jax.__version__}, "
        f"{datetime.date.today().isoformat()}, best of {args.repeats}\n"
    )
    print("| decode | host round trips | wall s | vs one program | tokens identical |")
    print("|---|---|---|---|---|")
    for name, seconds in best.items():
        trips = 0 if name == "one program" else -(-(args.new_tokens - 1) // int(name.split()[-1]))
        print(f"| {name} | {trips} | {seconds:.2f} | {seconds / base:.2f}x | {same[name]} |")


if __name__ == "__main__":
    main()
