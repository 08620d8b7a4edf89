"""Command line: evaluate a trained run, one checkpoint, or a model on several tasks at once.

    python -m jaxrl_llm.evaluate --workdir runs/grpo_smollm2                 # newest checkpoint
    python -m jaxrl_llm.evaluate --workdir runs/grpo_smollm2 --step 15 --tasks chain_sum,gcd
    python -m jaxrl_llm.evaluate --checkpoint runs/grpo_smollm2/checkpoints/30 --num_samples 8
    python -m jaxrl_llm.evaluate --model smollm2-135m-instruct --tasks gcd,lcm --jsonl gsm.jsonl
    python -m jaxrl_llm.evaluate --workdir runs/grpo_smollm2 --adversarial

A run of an episode task (`config.env`: tool use, Multi-IF) is evaluated on its own task, as
its runner does: greedy episodes on `--size` test examples, with accuracy, per-turn accuracy,
tool-call rates and turns per episode (`jaxrl_llm.envs.evaluation`); `--tasks` / `--jsonl` then
evaluate single-turn tasks instead.

Per task (a preset or reasoning-gym name, `--size` prompts of `--seed`) and per JSONL file: greedy
pass@1, and with `--num_samples n` sampled pass@k and maj@k for each k of `--ks` up to n, mean
completion length and truncation rate (`jaxrl_llm.evals`). `--adversarial` adds the adversarial
arithmetic evaluation (`jaxrl_llm.evals.adversarial`). Results go to `--out` (default
`<workdir>/eval`, or `runs/eval/<model>`): `results_<label>.json`, `results_<label>.md` (the
Markdown tables, also printed) and TensorBoard scalars `eval/<task>/<metric>` at the checkpoint's
step (`metrics.jsonl` and `tensorboard/` in `--out`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

from absl import app, flags, logging

_WORKDIR = flags.DEFINE_string("workdir", None, "A run directory: evaluates its newest checkpoint.")
_STEP = flags.DEFINE_integer("step", None, "With --workdir: the checkpoint step to evaluate.")
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "A checkpoint directory, <workdir>/checkpoints/<step>."
)
_MODEL = flags.DEFINE_string(
    "model", None, "A model name or path, evaluated as loaded (default when no run is given)."
)
_TASKS = flags.DEFINE_list(
    "tasks", None, "Task presets or reasoning-gym tasks (default: the run's task and eval.tasks)."
)
_JSONL = flags.DEFINE_multi_string(
    "jsonl",
    [],
    "JSONL files to evaluate whole (GSM8K-style, or with the run's prompt and answer columns); "
    "repeatable.",
)
_SIZE = flags.DEFINE_integer("size", None, "Prompts per task (default: the run's eval_size, 200).")
_SEED = flags.DEFINE_integer(
    "seed", None, "Seed of the task prompts (default: the run's eval_seed)."
)
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 0, "Sampled completions per prompt.")
_KS = flags.DEFINE_list("ks", ["1", "4", "8"], "The k of pass@k and maj@k.")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.7, "Temperature of the samples.")
_MAX_NEW_TOKENS = flags.DEFINE_integer(
    "max_new_tokens", None, "Most new tokens (default: the run's eval.max_new_tokens, 32)."
)
_SLOTS = flags.DEFINE_integer("num_slots", 50, "Rows decoded together.")
_ADVERSARIAL = flags.DEFINE_bool("adversarial", False, "Add the adversarial arithmetic evaluation.")
_ADVERSARIAL_SIZE = flags.DEFINE_integer("adversarial_size", 200, "Adversarial problems.")
_OUT = flags.DEFINE_string("out", None, "Output directory (see the module docstring).")
_IMPORTS = flags.DEFINE_multi_string(
    "import",
    [],
    "A module or .py file registering tasks, scorers or algorithms, imported first; repeatable "
    "(a run's own imports.json is imported with --workdir).",
)
_SCORER = flags.DEFINE_string(
    "scorer",
    None,
    "Held-out scorer (jaxrl_llm.evals.scorers; default: the run's config.eval.scorer, 'stated').",
)


def _policy():
    """(config, model, tokenizer, params, step, label, default out dir)."""
    from jaxrl_llm.config import config_for
    from jaxrl_llm.models import from_pretrained
    from jaxrl_llm.runners.restore import restore_policy

    given = [f for f in (_WORKDIR, _CHECKPOINT, _MODEL) if f.value is not None]
    if len(given) > 1:
        raise app.UsageError("Give one of --workdir, --checkpoint and --model.")
    workdir, step = _WORKDIR.value, _STEP.value
    if _CHECKPOINT.value is not None:
        path = os.path.normpath(_CHECKPOINT.value)
        head, name = os.path.split(path)
        if not name.isdigit() or os.path.basename(head) != "checkpoints":
            raise ValueError(
                f"--checkpoint={_CHECKPOINT.value!r} must be <workdir>/checkpoints/<step>."
            )
        workdir, step = os.path.dirname(head), int(name)
    if workdir is not None:
        from jaxrl_llm.user_imports import import_all, recorded_imports

        import_all(recorded_imports(workdir))  # the run's --import modules (its task, scorer)
        restored = restore_policy(workdir, step)
        parts = restored.parts
        return (
            restored.config,
            parts.model,
            parts.tokenizer,
            restored.params,
            restored.step,
            f"step{restored.step}",
            os.path.join(workdir, "eval"),
        )
    config = config_for("grpo")
    name = _MODEL.value or config.model.name
    with config.unlocked():
        config.model.name = name
    model, tokenizer = from_pretrained(name, dtype=config.model.dtype)
    label = os.path.basename(os.path.normpath(name)).replace(".gguf", "")
    return config, model, tokenizer, None, 0, label, f"runs/eval/{label}"


def _jsonl_set(config, path: str):
    """A --jsonl file as one set: GSM8K-style lines ("question", "answer" with "####") through
    `JsonlSource`, or a file with the run's prompt column (`config.task.data.prompt_column`,
    default "prompt") through the user-data reader, as the run read its own data."""
    import json

    from jaxrl_llm.data import JsonlSource
    from jaxrl_llm.data.user_data import file_examples
    from jaxrl_llm.evals import EvalSet

    with open(path) as f:
        first = next((line for line in f if line.strip()), "{}")
    name = os.path.splitext(os.path.basename(path))[0]
    prompt_column = config.task.get("data", {}).get("prompt_column", "prompt")
    if prompt_column in json.loads(first):
        return EvalSet(name, file_examples(path, config.task, name=name))
    source = JsonlSource(path)
    return EvalSet(source.name, list(source))


def _eval_sets(config):
    from jaxrl_llm.runners.components import build_eval_sets

    sets = build_eval_sets(config, _TASKS.value, size=_SIZE.value, seed=_SEED.value)
    return sets + [_jsonl_set(config, path) for path in _JSONL.value]


def _adversarial_table(result) -> str:
    rows = [
        ("no attack", result["clean_accuracy"], float("nan")),
        ("hand-written templates", result["template_accuracy"], result["template_success"]),
        ("searched (PIRS-style)", result["searched_accuracy"], result["searched_success"]),
    ]
    lines = ["| prompts | accuracy | asserted wrong answer given |", "| --- | ---: | ---: |"]
    for name, acc, success in rows:
        cells = ["" if math.isnan(v) else f"{100 * v:.1f}%" for v in (acc, success)]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv):
    """absl's entry point: evaluates the run, checkpoint or model the flags name."""
    del argv
    from jaxrl_llm.evals import (
        DEFAULT_SCORER,
        EvalSettings,
        Evaluator,
        get_scorer,
        markdown_table,
        robustness,
    )
    from jaxrl_llm.metrics import MetricsWriter

    logging.set_verbosity(logging.WARNING)
    t0 = time.time()
    config, model, tokenizer, params, step, label, out = _policy()
    out = _OUT.value or out
    scorer_name = _SCORER.value or config.eval.get("scorer", DEFAULT_SCORER)
    scorer = get_scorer(scorer_name, field="--scorer" if _SCORER.value else "config.eval.scorer")
    settings = EvalSettings(
        max_new_tokens=_MAX_NEW_TOKENS.value or config.eval.max_new_tokens,
        num_slots=_SLOTS.value,
        num_samples=_NUM_SAMPLES.value,
        ks=tuple(int(k) for k in _KS.value),
        temperature=_TEMPERATURE.value,
        min_prompt_bucket=config.rollout.min_prompt_bucket,
        system_prompt=config.task.system_prompt,
        instruction_suffix=config.task.instruction_suffix,
    )
    if config.env.name and not _TASKS.value and not _JSONL.value:
        from jaxrl_llm.envs.evaluation import episode_table, evaluate_episodes

        results = {
            config.env.name: evaluate_episodes(
                config, model, tokenizer, params=params, size=_SIZE.value, seed=_SEED.value,
                num_slots=_SLOTS.value,
            )
        }  # fmt: skip
        report = {"policy": label, "step": step, "episodes": True, "tasks": results}
        text = f"## {label}: greedy episodes\n\n{episode_table(results)}\n"
    else:
        evaluator = Evaluator(
            model, tokenizer, scorer, settings, timeout_s=config.rewards.timeout_s
        )
        results = evaluator(_eval_sets(config), params=params)
        report = {
            "policy": label,
            "step": step,
            "scorer": scorer_name,
            "settings": settings.__dict__,
            "tasks": results,
        }
        text = f"## {label} (scorer: {scorer_name})\n\n{markdown_table(results)}\n"
    if _ADVERSARIAL.value:
        if "episodes" in report:
            raise app.UsageError("--adversarial evaluates single-turn arithmetic: add --tasks.")
        report["adversarial"] = robustness(
            evaluator, seed=config.seed, size=_ADVERSARIAL_SIZE.value, params=params
        )
        text += f"\nAdversarial arithmetic:\n\n{_adversarial_table(report['adversarial'])}\n"
    report["seconds"] = time.time() - t0
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"results_{label}.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    with open(os.path.join(out, f"results_{label}.md"), "w") as f:
        f.write(text)
    writer = MetricsWriter(out)
    scalars = {
        f"eval/{task}/{k}": v for task, metrics in results.items() for k, v in metrics.items()
    }
    if "adversarial" in report:
        scalars.update(
            {
                f"adversarial/{k}": v
                for k, v in report["adversarial"].items()
                if isinstance(v, float) and not math.isnan(v)
            }
        )
    writer.write_scalars(step, scalars)
    if "episodes" not in report:  # per question: id, prompt, completion, answer, reference, score
        writer.write_eval_questions(step, evaluator.correct, evaluator.details)
    writer.close()
    print(text)
    print(f"[jaxrl_llm] results in {out} ({report['seconds']:.0f}s)")


def _parse_flags(argv):
    """absl flag parsing after importing the `--import` modules (one line if one fails)."""
    from jaxrl_llm.user_imports import import_from_argv_or_exit

    import_from_argv_or_exit(argv)
    return flags.FLAGS(argv)


def cli():
    """Console entry point (`jaxrl-llm-evaluate`)."""

    def run(argv):
        try:
            main(argv)
        except (ValueError, FileNotFoundError, KeyError) as e:
            from jaxrl_llm.config import error_line

            print(f"error: {error_line(e)}", file=sys.stderr)
            sys.exit(1)

    app.run(run, flags_parser=_parse_flags)


if __name__ == "__main__":
    cli()
