"""Seconds per GRPO step of Google's Tunix (google-tunix 0.1.7) on SmolLM2-135M-Instruct, CPU.

Same setup as `grpo_step.py`: the float32 weights our library exports with `save_hf`
(Llama architecture, tied embeddings), 8 prompts x 4 completions, at most 128 new tokens,
temperature 1, beta 0 (so Tunix builds no reference model), AdamW at learning rate 1e-6
(b2 0.99, gradient-norm clip 1, as our config), one optimizer update per step, reward 1 when the
last number in the completion equals the answer. One rollout generates all 32 sequences; the
train step accumulates gradients over micro batches of `--train-micro` prompts (default 2, i.e.
8 sequences, through `optax.MultiSteps`): the whole 32-sequence batch at once went past 21 GB of
RSS and was killed on a 24 GB machine.

How: the weights are read by Tunix's own safetensors loader into its Llama3 model
(`tunix.models.llama3`, configured from the export's config.json, `weight_tying=True`, with
its rope theta patched in: see `use_rope_theta`); the `RLCluster` puts actor and rollout on one
single-device mesh, so they share the weights, and Tunix's "vanilla" JAX sampler does the
rollout (prompt window 64 tokens, KV cache 64 + 128). Tunix trains on completions padded to the
full 128 tokens, so its train time does not shrink with shorter completions. `GRPOLearner.train`
runs 1 warm-up step (compiles) plus `--steps` timed steps. Timing wraps `RLCluster.generate`
(rollout) and `RLCluster.update_actor` (train: loss, gradient, optimizer) on the instance; a step
runs from the end of one step's last update to the end of the next, so it also holds the reward
and advantage computation and Tunix's data pipeline. Completion lengths are Tunix's completion
tokens, which stop before the EOS token (Tunix leaves EOS out of the completion). Medians over
the timed steps are printed as the last line, `SYSTEM_RESULT {json}`.

Tunix's sampler masks every token equal to the pad id as padding, in prompts too. The export's
tokenizer pads with <|im_end|>, which the chat template puts inside every prompt, so the
tokenizer's pad token is set to <|endoftext|> (id 0, never in these prompts or completions).

    /tmp/tunix_venv/bin/python experiments/benchmarks/tunix_grpo.py \
        --export-dir /tmp/smollm2_hf --prompts-json /tmp/chain_sum_prompts.json --steps 3

The prompts JSON is a list of {"question": str, "answer": str} objects (chain_sum questions from
reasoning-gym); each question becomes one user message under the export's chat template.
Needs `pip install google-tunix` (brings jax, flax, qwix, transformers); no torch.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import re
import resource
import statistics
import time

PROMPTS, GROUP, MAX_NEW, PROMPT_WINDOW = 8, 4, 128, 64
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def last_number_reward(prompts, completions, answer, **_):
    """1.0 where the completion's last number equals the answer, else 0.0."""
    rewards = []
    for completion, expected in zip(completions, answer, strict=True):
        numbers = NUMBER.findall(completion.replace(",", ""))
        try:
            ok = bool(numbers) and float(numbers[-1]) == float(expected)
        except ValueError:
            ok = False
        rewards.append(1.0 if ok else 0.0)
    return rewards


def use_rope_theta(theta: float) -> None:
    """Makes Tunix's Llama3 rotate with `theta`.

    In google-tunix 0.1.7, `tunix/models/llama3/model.py` calls `apply_rope` (lines 352 and 357)
    without `ModelConfig.rope_theta`, so every Llama3 model rotates with the default theta 1e6
    (line 249). SmolLM2 uses 1e5: unpatched, the logits of a chat prompt differ from ours by up to
    9.4 (argmax agrees on 88% of positions); patched, by 1.2e-4 (100%).
    """
    from tunix.models.llama3 import model as llama3

    llama3.apply_rope = functools.partial(llama3.apply_rope, rope_theta=theta)


def llama_config(export_dir: str):
    """Tunix Llama3 ModelConfig with the dimensions of the export's HF config.json."""
    from tunix.models.llama3 import model as llama3

    with open(os.path.join(export_dir, "config.json")) as f:
        hf = json.load(f)
    return llama3.ModelConfig(
        num_layers=hf["num_hidden_layers"],
        vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"],
        hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"],
        head_dim=hf.get("head_dim", hf["hidden_size"] // hf["num_attention_heads"]),
        num_kv_heads=hf["num_key_value_heads"],
        rope_theta=hf["rope_theta"],
        norm_eps=hf["rms_norm_eps"],
        weight_tying=hf.get("tie_word_embeddings", False),
    )


def load_llama(export_dir: str):
    """(model, mesh): the export as a float32 Tunix Llama3 on a one-device mesh, rope fixed."""
    import jax
    import jax.numpy as jnp
    from tunix.models.llama3 import params as llama3_params

    # Auto axes: with this jax's default (Explicit) axes, the Llama3 embedding gather fails.
    auto = jax.sharding.AxisType.Auto
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(auto, auto))
    config = llama_config(export_dir)
    use_rope_theta(config.rope_theta)
    model = llama3_params.create_model_from_safe_tensors(
        export_dir, config, mesh, dtype=jnp.float32
    )
    return model, mesh


def cluster_config(
    mesh,
    optimizer,
    *,
    prompts: int,
    train_micro: int,
    max_steps: int,
    max_new: int,
    prompt_window: int,
    temperature: float,
    seed: int,
):
    """Tunix's RL cluster config of our benchmarks: every role on `mesh`, the vanilla rollout of
    all prompts x group sequences at once, one optimizer update a step accumulated over micro
    batches of `train_micro` prompts, no evaluation of Tunix's own."""
    from tunix.rl import rl_cluster as rlc
    from tunix.rl.rollout import base_rollout

    return rlc.ClusterConfig(
        role_to_mesh={rlc.Role.ACTOR: mesh, rlc.Role.REFERENCE: mesh, rlc.Role.ROLLOUT: mesh},
        rollout_engine="vanilla",
        offload_to_cpu=False,
        training_config=rlc.RLTrainingConfig(
            actor_optimizer=optimizer,
            eval_every_n_steps=10**9,
            max_steps=max_steps,
            mini_batch_size=prompts,  # one optimizer update per step ...
            train_micro_batch_size=train_micro,  # ... accumulated over micro batches
            rollout_micro_batch_size=prompts,  # one rollout of all prompts x group sequences
        ),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=max_new,
            max_prompt_length=prompt_window,
            kv_cache_size=prompt_window + max_new,
            temperature=temperature,
            top_p=1.0,
            top_k=None,
            seed=seed,
        ),
    )


def batches(tokenizer, examples: list[dict], prompts: int):
    """Endless batches of `prompts` chat-formatted prompts with their answers (numpy, as Tunix wants)."""
    import numpy as np

    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": e["question"]}], add_generation_prompt=True, tokenize=False
        )
        for e in examples
    ]
    answers = [str(e["answer"]) for e in examples]
    longest = max(len(tokenizer.encode(t)) for t in texts)
    if longest > PROMPT_WINDOW:
        raise SystemExit(f"a prompt has {longest} tokens, more than the {PROMPT_WINDOW} window")
    rows = itertools.cycle(range(len(texts)))
    while True:
        idx = [next(rows) for _ in range(prompts)]
        yield {
            "prompts": np.array([texts[i] for i in idx]),
            "answer": np.array([answers[i] for i in idx]),
        }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--export-dir", required=True, help="HF-format export (save_hf)")
    parser.add_argument("--prompts-json", required=True, help='[{"question":..., "answer":...}]')
    parser.add_argument("--steps", type=int, default=3, help="timed steps after 1 warm-up step")
    parser.add_argument("--prompts", type=int, default=PROMPTS, help="prompts per step")
    parser.add_argument("--group", type=int, default=GROUP, help="completions per prompt")
    parser.add_argument("--max-new", type=int, default=MAX_NEW, help="max new tokens")
    parser.add_argument(
        "--train-micro",
        type=int,
        default=2,
        help="prompts per gradient-accumulation micro batch (x group sequences); the whole "
        "batch in one go (8) ran out of a 24 GB machine's memory",
    )
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("tunix_grpo.py"), flush=True)

    import jax
    import numpy as np
    import optax
    import transformers
    from flax import nnx
    from tunix.rl import rl_cluster as rlc
    from tunix.rl.grpo import grpo_learner

    with open(args.prompts_json) as f:
        examples = json.load(f)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.export_dir)
    tokenizer.pad_token = "<|endoftext|>"  # see the module doc: pad must not occur in prompts

    model, mesh = load_llama(args.export_dir)
    optimizer = optax.chain(  # our benchmark's optimizer: AdamW (0.9, 0.99), clip 1.0, no decay
        optax.clip_by_global_norm(1.0),
        optax.adamw(1e-6, b1=0.9, b2=0.99, weight_decay=0.0),
    )
    config = cluster_config(
        mesh,
        optimizer,
        prompts=args.prompts,
        train_micro=args.train_micro,
        max_steps=1 + args.steps,
        max_new=args.max_new,
        prompt_window=PROMPT_WINDOW,
        temperature=1.0,
        seed=0,
    )
    cluster = rlc.RLCluster(actor=model, reference=None, tokenizer=tokenizer, cluster_config=config)
    rewards = []  # mean reward of each step's completions, a check that the weights loaded right

    def recorded_reward(prompts, completions, answer, **kw):
        out = last_number_reward(prompts, completions, answer, **kw)
        rewards.append(float(np.mean(out)))
        return out

    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster,
        algo_config=grpo_learner.GRPOConfig(num_generations=args.group, num_iterations=1, beta=0.0),
        reward_fns=recorded_reward,
    )

    # Instance-level timers around Tunix's rollout and train calls. One `generate` call per step
    # (all prompts x group sequences), then one `update_actor` call per micro batch; the step's
    # optimizer update is applied by its last one.
    records = []  # per step: rollout seconds, train seconds, end time, mean completion length
    generate, update_actor = cluster.generate, cluster.update_actor

    def timed_generate(*a, **kw):
        t0 = time.perf_counter()
        out = generate(*a, **kw)
        records.append(
            {
                "rollout": time.perf_counter() - t0,
                "train": 0.0,
                "end": math.nan,
                "length": float(np.mean([len(t) for t in out.tokens])),
            }
        )
        return out

    def timed_update_actor(*a, **kw):
        t0 = time.perf_counter()
        out = update_actor(*a, **kw)
        jax.block_until_ready(nnx.state(cluster.actor_trainer.model))
        records[-1]["end"] = time.perf_counter()
        records[-1]["train"] += records[-1]["end"] - t0
        return out

    cluster.generate, cluster.update_actor = timed_generate, timed_update_actor

    start = time.perf_counter()
    learner.train(batches(tokenizer, examples, args.prompts))
    ends = [r["end"] for r in records]
    steps = [b - a for a, b in zip([start] + ends[:-1], ends, strict=True)]
    rollout_s = [r["rollout"] for r in records]
    train_s = [r["train"] for r in records]
    lengths = [r["length"] for r in records]
    for i, s in enumerate(steps):
        print(
            f"step {i}: {s:.2f}s  rollout {rollout_s[i]:.2f}s  train {train_s[i]:.2f}s  "
            f"mean completion {lengths[i]:.1f} tokens  mean reward {rewards[i]:.3f}",
            flush=True,
        )

    def med(xs):
        return statistics.median(xs[1:]) if len(xs) > 1 else math.nan

    result = {
        "step_s": med(steps),
        "rollout_s": med(rollout_s),
        "train_s": med(train_s),
        "completion_tokens": statistics.mean(lengths[1:]) if len(lengths) > 1 else math.nan,
        "mean_reward": statistics.mean(rewards),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        "timed_steps": len(steps) - 1,
        "tunix_version": _version("google-tunix"),
        "jax_version": jax.__version__,
    }
    print("SYSTEM_RESULT " + json.dumps(result), flush=True)


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    main()
