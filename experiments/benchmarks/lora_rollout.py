"""The LoRA rollout's two modes: merge adapters into the decode weights, or apply them.

    .venv/bin/python experiments/benchmarks/lora_rollout.py            # SmolLM2-135M-Instruct
    .venv/bin/python experiments/benchmarks/lora_rollout.py --tiny     # a tiny random model

One `RolloutWorker` per mode on one device, the policy with rank-r adapters on every projection
(B random, so the adapters change the output). Per mode: the seconds of a weight sync after the
first (merge: reshard the adapters and fold W + scale A B into a decode copy; apply: reshard the
adapters), the seconds of sampling `--prompts` chat prompts x `--new_tokens` tokens (median of
`--repeats`, after a warm-up that compiles), and the decode weights' bytes. Beside them, full
fine-tuning's sync (a reshard of every weight) and its decode, the reference the ratios divide
by. Both LoRA modes must sample the same tokens (checked: they are the same function).
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np
from flax import nnx


def _timed(fn, repeats: int) -> float:
    fn()  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("lora_rollout.py"), flush=True)

    from jaxrl_llm.models import from_pretrained, init_model, tiny_config
    from jaxrl_llm.models.lora import LoraConfig, add_adapters
    from jaxrl_llm.roles import Learner, RolloutWorker, make_placement
    from jaxrl_llm.training import make_optimizer

    def policy():
        if args.tiny:
            return init_model(tiny_config(), seed=0), None
        return from_pretrained("smollm2-135m-instruct")

    class _TinyTokenizer:
        pad_token_id = 0

        @staticmethod
        def stop_token_ids():
            return [1]

    import ml_collections

    placement = make_placement(
        ml_collections.ConfigDict(dict(mode="colocated", train_mesh=(1, 1), rollout_mesh=(1, 1)))
    )
    rng = np.random.default_rng(0)
    prompts = [
        list(rng.integers(10, 200, size=int(rng.integers(8, 24)))) for _ in range(args.prompts)
    ]

    def measure(mode: str):
        """(figures, sampled rollout) of one mode."""
        model, tokenizer = policy()
        tokenizer = tokenizer or _TinyTokenizer()
        if mode != "full":
            add_adapters(model, LoraConfig(rank=args.rank, alpha=2.0 * args.rank))
            adapters = nnx.state(model, nnx.LoRAParam)
            key = jax.random.key(1)
            noise = lambda x: x + 0.01 * jax.random.normal(key, x.shape, x.dtype)
            nnx.update(model, jax.tree.map(noise, adapters))
        rollout = RolloutWorker(
            model,
            tokenizer,
            placement.rollout_mesh,
            max_new_tokens=args.new_tokens,
            temperature=1.0,
            lora_rollout="apply" if mode == "full" else mode,
        )
        actor = Learner(model, make_optimizer(learning_rate=1e-5), None, placement.train_mesh)
        rollout.sync(actor.params)  # the first sync lays the base out

        def sync():
            rollout.sync(actor.params)
            jax.block_until_ready(jax.tree.leaves(rollout.params))

        figures = {
            "sync s": _timed(sync, args.repeats),
            "decode s": _timed(lambda: rollout.sample(prompts, seed=0), args.repeats),
            "decode weights MiB": sum(x.nbytes for x in jax.tree.leaves(rollout.params)) / 2**20,
            "sync payload MiB": rollout.sync_payload_bytes / 2**20,
        }
        return figures, rollout.sample(prompts, seed=0)

    results, samples = {}, {}
    for mode in ("full", "merge", "apply"):
        results[mode], samples[mode] = measure(mode)
    tokens = sum(int(np.sum(s.lengths)) for s in samples.values()) / len(samples)
    results_note = f"{tokens:.0f} tokens sampled a call"
    np.testing.assert_array_equal(samples["merge"].tokens, samples["apply"].tokens)
    name = "tiny" if args.tiny else "SmolLM2-135M-Instruct"
    print(
        f"\n{name}, rank {args.rank} on every projection, {args.prompts} prompts x "
        f"{args.new_tokens} new tokens ({results_note}), {jax.devices()[0].platform}, median of "
        f"{args.repeats}\n"
    )
    print("| figure | full fine-tuning | LoRA merge | LoRA apply | apply / merge |")
    print("| --- | --- | --- | --- | --- |")
    for key in results["full"]:
        f, m, a = (results[k][key] for k in ("full", "merge", "apply"))
        print(f"| {key} | {f:.4g} | {m:.4g} | {a:.4g} | {a / m:.3f} |")


if __name__ == "__main__":
    main()
