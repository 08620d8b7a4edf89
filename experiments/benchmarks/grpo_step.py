"""Seconds per GRPO step on SmolLM2-135M-Instruct: jaxrl_llm against TRL's GRPOTrainer, same run.

Both sides train the same weights (our GGUF load, exported with `save_hf` so transformers reads
plain float32 safetensors), on the same reasoning-gym prompts and reward, with 8 prompts x 4
completions, at most 128 new tokens, temperature 1, float32, beta 0 (no reference model), one
optimizer update per step. The first step of each side (compilation, warm-up) is excluded; the
table shows the median of the timed steps, split into rollout (generation), reward and training.

    python experiments/benchmarks/grpo_step.py              # both sides, 3 timed steps each
    python experiments/benchmarks/grpo_step.py --skip-trl   # ours only (no peers extra)

TRL needs the `peers` extra (torch CPU, transformers, trl).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

PROMPTS, GROUP, MAX_NEW = 8, 4, 128


def run_ours(args, workdir: str) -> dict:
    from jaxrl_llm.config import apply_overrides, grpo_config
    from jaxrl_llm.metrics import read_metrics
    from jaxrl_llm.runners import train

    config = grpo_config()
    apply_overrides(
        config,
        {
            "rollout.num_prompts": PROMPTS,
            "rollout.group_size": GROUP,
            "rollout.max_new_tokens": MAX_NEW,
            "rollout.temperature": 1.0,
            "train.num_minibatches": 1,
            "train.num_steps": 1 + args.steps,
            "train.checkpoint_every": 1000,
            "loss.kl_beta": 0.0,
            "optimizer.learning_rate": 1e-6,
            "eval.before": False,
            "eval.after": False,
        },
    )
    train(config, workdir, progress=False)
    rows = read_metrics(workdir)[1:]  # drop the compile step
    return {
        "step_s": statistics.median(r["time/step_s"] for r in rows),
        "rollout_s": statistics.median(r["time/rollout_s"] for r in rows),
        "reward_s": statistics.median(r["time/reward_s"] for r in rows),
        "train_s": statistics.median(r["time/train_s"] for r in rows),
        "completion_tokens": statistics.mean(r["completion/length"] for r in rows),
    }


def run_trl(args, export_dir: str) -> dict:
    import datasets
    import torch
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    from jaxrl_llm.data import ReasoningGymSource
    from jaxrl_llm.rewards import task_reward

    torch.manual_seed(0)
    source = ReasoningGymSource(
        "chain_sum",
        seed=0,
        size=PROMPTS * (args.steps + 1),
        min_terms=2,
        max_terms=2,
        min_digits=1,
        max_digits=2,
    )
    examples = {e.question: e for e in source}
    dataset = datasets.Dataset.from_list(
        [{"prompt": [{"role": "user", "content": q}], "question": q} for q in examples]
    )

    def reward(prompts, completions, question, **_):
        return [
            task_reward("", c[0]["content"] if isinstance(c, list) else c, examples[q])
            for c, q in zip(completions, question, strict=True)
        ]

    model = transformers.AutoModelForCausalLM.from_pretrained(export_dir, torch_dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(export_dir)
    generate_s = []
    original_generate = model.generate

    def timed_generate(*a, **kw):
        t0 = time.perf_counter()
        out = original_generate(*a, **kw)
        generate_s.append(time.perf_counter() - t0)
        return out

    model.generate = timed_generate
    step_times, lengths = [], []

    class Timer(transformers.TrainerCallback):
        def on_step_begin(self, *a, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **kw):
            step_times.append(time.perf_counter() - self.t0)

        def on_log(self, _args, _state, _control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    config = GRPOConfig(
        output_dir=os.path.join(export_dir, "trl"),
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=MAX_NEW,
        temperature=1.0,
        beta=0.0,
        learning_rate=1e-6,
        max_steps=1 + args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Timer()],
    )
    trainer.train()
    steps = step_times[1:]
    gen = generate_s[1:] if len(generate_s) == len(step_times) else generate_s[-len(steps) :]
    return {
        "step_s": statistics.median(steps),
        "rollout_s": statistics.median(gen),
        "reward_s": float("nan"),
        "train_s": statistics.median(s - g for s, g in zip(steps, gen, strict=False)),
        "completion_tokens": statistics.mean(lengths[1:]) if len(lengths) > 1 else float("nan"),
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps", type=int, default=3, help="timed steps per side (after 1 warm-up)"
    )
    parser.add_argument("--skip-trl", action="store_true")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["jaxrl_llm"] = run_ours(args, os.path.join(tmp, "ours"))
        if not args.skip_trl:
            import jax.numpy as jnp

            from jaxrl_llm.models import from_pretrained, save_hf

            model, tokenizer = from_pretrained("smollm2-135m-instruct", dtype=jnp.float32)
            save_hf(model, tokenizer, os.path.join(tmp, "export"))
            del model
            results["TRL GRPOTrainer"] = run_trl(args, os.path.join(tmp, "export"))

    print(
        f"\nGRPO step, SmolLM2-135M-Instruct float32, {PROMPTS} prompts x {GROUP} completions, "
        f"<= {MAX_NEW} new tokens, beta 0, median of {args.steps} steps after 1 warm-up"
    )
    print(
        f"{'system':<18} {'s/step':>8} {'rollout s':>10} {'reward s':>9} {'train s':>8} {'mean completion':>16}"
    )
    for name, r in results.items():
        print(
            f"{name:<18} {r['step_s']:8.1f} {r['rollout_s']:10.1f} {r['reward_s']:9.2f} "
            f"{r['train_s']:8.1f} {r['completion_tokens']:16.1f}"
        )
    if len(results) == 2:
        ours, trl = results["jaxrl_llm"], results["TRL GRPOTrainer"]
        print(
            f"\nspeed-up per step: {trl['step_s'] / ours['step_s']:.2f}x (target >= 3x); "
            f"rollout {trl['rollout_s'] / ours['rollout_s']:.2f}x, training {trl['train_s'] / ours['train_s']:.2f}x"
        )


if __name__ == "__main__":
    main()
