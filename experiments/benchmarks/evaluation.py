"""Held-out evaluation through continuous batching against fixed batches, in one run.

The main job's evaluation: 200 held-out chain_sum prompts (the config's eval seed), greedy, at
most `eval.max_new_tokens` (32) new tokens, SmolLM2-135M-Instruct float32, 50 rows at a time.

  fixed, plain       batches of 50 through the engine as it was before compaction and prefix
                     sharing (`compaction=False, prefix_sharing="none"`): each batch prefills
                     50 x 64 prompt positions and decodes until its longest row ends.
  fixed, compacted   the same batches with compaction and group sharing (the new defaults).
  continuous         `greedy_accuracy`'s path: one `ContinuousGenerator` of 50 slots refilled
                     as rows finish, the chat template's common prefix prefilled once.

Each system's first call compiles and is not timed; the best of `--repeats` timed calls is kept.
The completions must be identical across systems (greedy decoding), and so the accuracies.

    .venv/bin/python experiments/benchmarks/evaluation.py
"""

from __future__ import annotations

import argparse
import os
import time

import jax.numpy as jnp
import numpy as np

from jaxrl_llm.config import grpo_config
from jaxrl_llm.data.presets import task_source
from jaxrl_llm.models import from_pretrained
from jaxrl_llm.rewards import accuracy, task_reward
from jaxrl_llm.rollout import ContinuousGenerator, Generator
from jaxrl_llm.rollout.chat import chat_generation_config, prompt_ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--slots", type=int, default=50, help="rows decoded together")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("evaluation.py"), flush=True)
    c = grpo_config()
    model, tokenizer = from_pretrained(c.model.name, dtype=jnp.float32)
    source = task_source(
        c.task.name, seed=c.task.eval_seed, size=args.prompts, overrides=c.task.kwargs.to_dict()
    )
    examples = list(source)
    _, ids = prompt_ids(tokenizer, examples)
    config = chat_generation_config(
        tokenizer,
        max_new_tokens=c.eval.max_new_tokens,
        temperature=0.0,
        min_prompt_bucket=c.rollout.min_prompt_bucket,
    )

    def fixed(generator):
        def run():
            out = []
            for start in range(0, len(ids), args.slots):
                out += generator(ids[start : start + args.slots]).completions()
            return out

        return run

    plain = Generator(
        model,
        config.replace(min_batch_bucket=args.slots, compaction=False, prefix_sharing="none"),
    )
    compacted = Generator(model, config.replace(min_batch_bucket=args.slots))
    continuous = ContinuousGenerator(
        model, config.replace(prefix_sharing="common"), num_slots=args.slots
    )
    systems = {
        "fixed batches, plain engine": fixed(plain),
        "fixed batches, compaction": fixed(compacted),
        "continuous batching": lambda: continuous(ids).completions(),
    }
    results = {}
    for name, run in systems.items():
        t = time.perf_counter()
        completions = run()
        first = time.perf_counter() - t
        seconds = np.inf
        for _ in range(args.repeats):
            t = time.perf_counter()
            run()
            seconds = min(seconds, time.perf_counter() - t)
        texts = [tokenizer.decode(x, skip_special_tokens=True) for x in completions]
        scores = [task_reward("", t, e) for t, e in zip(texts, examples, strict=True)]
        results[name] = (seconds, first - seconds, completions, accuracy(scores))
        print(f"# {name}: {seconds:.2f} s", flush=True)

    base_s, _, base_completions, _ = results["fixed batches, plain engine"]
    lengths = [len(x) for x in base_completions]
    load = os.getloadavg()[0]
    print(
        f"\nGreedy evaluation of {len(ids)} chain_sum prompts, SmolLM2-135M-Instruct float32, "
        f"<= {c.eval.max_new_tokens} new tokens, {args.slots} rows at a time; completion length "
        f"mean {np.mean(lengths):.1f}, max {max(lengths)}; best of {args.repeats}; "
        f"load average at the end {load:.1f}"
    )
    print("| system | s | compile s | accuracy | completions equal to plain | speed-up |")
    print("|---|---|---|---|---|---|")
    for name, (seconds, compile_s, completions, acc) in results.items():
        same = sum(a == b for a, b in zip(completions, base_completions, strict=True))
        print(
            f"| {name} | {seconds:.2f} | {compile_s:.0f} | {100 * acc:.1f}% "
            f"| {same}/{len(ids)} | {base_s / seconds:.2f}x |"
        )


if __name__ == "__main__":
    main()
