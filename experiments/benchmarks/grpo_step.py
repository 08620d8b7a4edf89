"""Seconds per GRPO step on SmolLM2-135M-Instruct: jaxrl_llm against TRL's GRPOTrainer, same run.

Both sides train the same weights (our GGUF load, exported with `save_hf` so transformers reads
plain float32 safetensors), on the same reasoning-gym prompts and reward, with 8 prompts x 4
completions, at most 128 new tokens, temperature 1, float32, beta 0 (no reference model), one
optimizer update per step. The first step of each side (compilation, warm-up) is excluded; the
table shows the median of the timed steps, split into rollout (generation), reward and training.

Ours uses the engine's compaction and group prefill sharing (the defaults); the "decode saved"
column is the share of decode row-steps the compacted loop did not compute against the plain
loop (32 rows until the longest completion ends), "prefill saved" the share of prompt positions
not prefilled (each prompt once instead of once per completion).

Ours runs twice: with sequence packing (`train.pack_sequences`; by default rows of 192 columns,
the rollout's width, their count rounded up to an even number, so a few row counts compile once
each) and without (one sequence per row at the rollout's full width, 64 + 128 columns). Rows of
192 hold about two sequences: attention over a packed row costs its width squared whatever its
segments, and `profile_train_step.py` showed 384-column rows spending a quarter of the step
there (RESULTS.md). A packed step that met a new row count compiles inside its train
time; such steps are left out of the median and counted in the "compiles" column.

    python experiments/benchmarks/grpo_step.py              # all three, 3 timed steps each
    python experiments/benchmarks/grpo_step.py --skip-trl   # ours only (no peers extra)

Each system runs in a process of its own (so the "peak RSS" column is that system's own
peak: our whole run with its rollout, reward and train step; TRL's trainer).

TRL needs the `peers` extra (torch CPU, transformers, trl). Google's Tunix, the closest JAX
peer, runs as a third system when `--tunix-python` names a Python with `google-tunix` installed
(a separate environment: Tunix pins its own jax): `tunix_grpo.py` in that interpreter, on the
same export and the same prompts.

    python3.11 -m venv /tmp/tunix_venv && /tmp/tunix_venv/bin/pip install google-tunix==0.1.7
    python experiments/benchmarks/grpo_step.py --tunix-python /tmp/tunix_venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import peak_rss_bytes, run_for_result  # noqa: E402

PROMPTS, GROUP, MAX_NEW = 8, 4, 128


def run_ours(args, workdir: str, *, pack: bool) -> dict:
    """Our side, packed or not; compile steps are left out of the medians (see the module doc)."""
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
            "train.pack_sequences": pack,
            "train.pack_row_multiple": args.pack_row_multiple,
            "train.pack_width": args.pack_width,
            "train.num_steps": 1 + args.steps,
            "train.checkpoint_every": 1000,
            "loss.kl_beta": 0.0,
            "optimizer.learning_rate": 1e-6,
            "eval.before": False,
            "eval.after": False,
        },
    )
    train(config, workdir, progress=False)
    rows = read_metrics(workdir)[1:]  # drop the first step (compiles everything)
    compiled = [r for r in rows if r.get("time/new_train_shape")]
    rows = [r for r in rows if not r.get("time/new_train_shape")] or rows
    return {
        "compiles": len(compiled),
        "train_rows": statistics.mean(r["train/rows"] for r in rows),
        "step_s": statistics.median(r["time/step_s"] for r in rows),
        "rollout_s": statistics.median(r["time/rollout_s"] for r in rows),
        "reward_s": statistics.median(r["time/reward_s"] for r in rows),
        # The reference forward (time/prepare_s) counted as training, as before the roles split.
        "train_s": statistics.median(r["time/train_s"] + r.get("time/prepare_s", 0) for r in rows),
        "completion_tokens": statistics.mean(r["completion/length"] for r in rows),
        "decode_saved": statistics.mean(r["rollout/decode_saved"] for r in rows),
        "prefill_saved": statistics.mean(r["rollout/prefill_saved"] for r in rows),
    }


def chain_sum_source(args):
    """The prompts every system trains on (reasoning-gym chain_sum, seed 0)."""
    from jaxrl_llm.data import ReasoningGymSource

    return ReasoningGymSource(
        "chain_sum",
        seed=0,
        size=PROMPTS * (args.steps + 1),
        min_terms=2,
        max_terms=2,
        min_digits=1,
        max_digits=2,
    )


def run_tunix(args, export_dir: str, workdir: str) -> dict | None:
    """Tunix's GRPO learner through `tunix_grpo.py` in the Tunix interpreter."""
    prompts = os.path.join(workdir, "prompts.json")
    with open(prompts, "w") as f:
        json.dump([{"question": e.question, "answer": e.answer} for e in chain_sum_source(args)], f)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tunix_grpo.py")
    cmd = [args.tunix_python, script, "--export-dir", export_dir, "--prompts-json", prompts]
    result = run_for_result(cmd + ["--steps", str(args.steps)], "SYSTEM_RESULT", "tunix")
    if result is None:
        return None
    return {**result, "reward_s": float("nan"), "compiles": 0, "train_rows": float("nan")}


def run_trl(args, export_dir: str) -> dict:
    import datasets
    import torch
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    from jaxrl_llm.rewards import task_reward

    torch.manual_seed(0)
    source = chain_sum_source(args)
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
        "compiles": 0,
        "train_rows": float("nan"),
    }


SYSTEMS = {
    "packed": "jaxrl_llm packed",
    "unpacked": "jaxrl_llm",
    "trl": "TRL GRPOTrainer",
    "tunix": "Tunix GRPOLearner",
}


def run_system(args, system: str, workdir: str) -> dict:
    """One system's medians and this process's peak RSS (called in a subprocess of its own)."""
    if system == "trl":
        result = run_trl(args, args.export_dir)
    else:
        result = run_ours(args, workdir, pack=system == "packed")
    result["peak_rss_gb"] = peak_rss_bytes() / 1e9
    return result


def system_in_subprocess(args, system: str, export_dir: str | None) -> dict | None:
    """Runs `run_system` in a fresh process, so each system's peak memory is its own."""
    cmd = [sys.executable, os.path.abspath(__file__), "--system", system]
    cmd += ["--steps", str(args.steps), "--pack-width", str(args.pack_width)]
    cmd += ["--pack-row-multiple", str(args.pack_row_multiple)]
    if export_dir:
        cmd += ["--export-dir", export_dir]
    return run_for_result(cmd, "SYSTEM_RESULT", system)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps", type=int, default=3, help="timed steps per side (after 1 warm-up)"
    )
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--pack-width", type=int, default=192, help="packed row width")
    parser.add_argument("--pack-row-multiple", type=int, default=2)
    parser.add_argument("--skip-unpacked", action="store_true")
    parser.add_argument("--skip-packed", action="store_true")
    parser.add_argument("--tunix-python", help="a Python with google-tunix: adds Tunix")
    parser.add_argument("--system", choices=sorted(SYSTEMS), help=argparse.SUPPRESS)
    parser.add_argument("--export-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.system:  # subprocess mode
        with tempfile.TemporaryDirectory() as tmp:
            result = run_system(args, args.system, tmp)
        print("SYSTEM_RESULT " + json.dumps(result), flush=True)
        return
    systems = [
        name
        for name, skip in (
            ("packed", args.skip_packed),
            ("unpacked", args.skip_unpacked),
            ("trl", args.skip_trl),
            ("tunix", not args.tunix_python),
        )
        if not skip
    ]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        export_dir = None
        if "trl" in systems or "tunix" in systems:
            export_dir = os.path.join(tmp, "export")
            subprocess.run(
                [sys.executable, "-c", _EXPORT.format(export_dir=export_dir)], check=True
            )
        for system in systems:
            if system == "tunix":
                result = run_tunix(args, export_dir, tmp)
            else:
                result = system_in_subprocess(args, system, export_dir)
            if result is not None:
                results[SYSTEMS[system]] = result

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nGRPO step, SmolLM2-135M-Instruct float32, {PROMPTS} prompts x {GROUP} completions, "
        f"<= {MAX_NEW} new tokens, beta 0, median of {args.steps} steps after 1 warm-up; "
        f"packed rows of {args.pack_width} columns, count rounded to {args.pack_row_multiple}; "
        f"each system in its own process; load average at the end {load:.1f}"
    )
    header = (
        "| system | s/step | rollout s | reward s | train s | mean completion tokens "
        "| train rows | compiles left out | decode saved | prefill saved | peak RSS GB "
        "| TRL s/step / this |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    trl = results.get("TRL GRPOTrainer")
    for name, r in results.items():
        ratio = "-" if trl is None else f"{trl['step_s'] / r['step_s']:.2f}x"
        print(
            f"| {name} | {r['step_s']:.1f} | {r['rollout_s']:.1f} | {r['reward_s']:.2f} "
            f"| {r['train_s']:.1f} | {r['completion_tokens']:.1f} | {r['train_rows']:.1f} "
            f"| {r['compiles']} | {_share(r, 'decode_saved')} | {_share(r, 'prefill_saved')} "
            f"| {r['peak_rss_gb']:.1f} | {ratio} |"
        )
    for peer_name in ("TRL GRPOTrainer", "Tunix GRPOLearner"):
        peer = results.get(peer_name)
        if peer is None:
            continue
        for name in [n for n in results if n.startswith("jaxrl_llm")]:
            ours = results[name]
            print(
                f"{name}: {peer['step_s'] / ours['step_s']:.2f}x {peer_name} per step; "
                f"rollout {peer['rollout_s'] / ours['rollout_s']:.2f}x, "
                f"training {peer['train_s'] / ours['train_s']:.2f}x, "
                f"peak memory {ours['peak_rss_gb']:.1f} GB against {peer['peak_rss_gb']:.1f} GB"
            )


def _share(result: dict, key: str) -> str:
    return f"{100 * result[key]:.0f}%" if key in result else "-"


# The weights TRL trains: our GGUF load exported as float32 safetensors (in its own process).
_EXPORT = """
import jax.numpy as jnp
from jaxrl_llm.models import from_pretrained, save_hf
model, tokenizer = from_pretrained("smollm2-135m-instruct", dtype=jnp.float32)
save_hf(model, tokenizer, {export_dir!r})
"""


if __name__ == "__main__":
    main()
