"""Held-out accuracy against wall time: our GRPO and TRL's GRPOTrainer, one recipe, one machine.

Both sides train the same weights with the same recipe, one after the other, each in a process
of its own, until its held-out greedy accuracy reaches `--target` or its training clock passes
`--cap-min` (or `--max-steps` steps are done):

  recipe     the run config (`--config`, default the main job's `grpo_smollm2.py`, with `--set`
             overrides): model, task, prompts per step, group size, temperature, most new
             tokens, learning rate and schedule, AdamW betas, clip range, KL weight, loss
             aggregation, reward. TRL's `GRPOConfig` is derived from it (`trl_arguments`); a
             field TRL cannot mirror (dynamic sampling, an entropy bonus, ...) is refused,
             or with `--trl-nearest` given TRL's nearest counterpart (`trl_nearest`: none for
             dynamic sampling, its Skywork-OR1 control for an adaptive entropy weight), each
             difference printed with the result. The main job's "stable" recipe needs it.
  weights    the config's initial policy exported once by `save_hf` (float32 safetensors);
             both sides load that directory.
  prompts    our sampler's training pool in our batcher's order; TRL gets the same rendered
             chat prompts in the same order (its shuffling off), 8 a step by default.
  reward     our `RewardRunner` of the config (`build_rewards`) on both sides.
  evaluation OUR evaluator (`jaxrl_llm.evals.Evaluator` with the run's `eval_settings`) on the
             run's held-out questions (`build_eval_sets`: `config.task.eval_size` distinct
             questions of the held-out side of the hash split), greedy, before the first step,
             every `--eval-every` steps and after the last. TRL's policy is converted back into
             our model in memory (its `state_dict` through `assign_hf_tensors`, the loader our
             Hugging Face import uses), so the same decoder and scorer read both policies.

The clock. Each side's wall time runs from the start of its training: model load, data, the
trainer's or runner's construction and every compilation included (no persistent compilation
cache on our side, unless `--compilation-cache DIR` gives one: "cold" when DIR is empty, the
first run, "warm" when an earlier run filled it, a user's second run; the report says which),
module imports excluded on both. Evaluation is excluded from both: the clock
is paused while the held-out set is decoded and scored (and while TRL's weights are copied into
our model, or Tunix's written out for it); building TRL's evaluator happens before its clock
starts, ours is built inside our runner (held-out questions and an `Evaluator` object, well under
a second). The cap is checked after each step, so a side passes it by at most one step. TRL's
peak memory includes our evaluator's model (about 0.5 GB), which shares its process.

The ratio. Our time to reach a level over TRL's time to reach it (the target is <= 1/3), at
`--target`, and when TRL did not reach it also at TRL's best held-out accuracy (its final one
unless it fell after its best). A side that never reached the level gives a bound, its time
being at least the training seconds it ran (censored at its stop).

    python experiments/benchmarks/time_to_accuracy.py --cap-min 60 --target 0.35 --trl-nearest
    python experiments/benchmarks/time_to_accuracy.py --skip-trl --cap-min 6     # ours only

The figure (accuracy against wall minutes, one line per side) goes to `--out`.png and the curves
to `--out`.json. Google's Tunix runs as a third side when `--tunix-python` names a Python with
`google-tunix` installed (`time_to_accuracy_tunix.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable

DEFAULT_CONFIG = "experiments/configs/grpo_smollm2.py"
SYSTEMS = {"ours": "jaxrl_llm GRPO", "trl": "TRL GRPOTrainer", "tunix": "Tunix GRPOLearner"}
# TRL's names for our loss aggregations (`config.loss.agg`); the others have no TRL twin.
TRL_LOSS_TYPES = {
    "token-mean": "dapo",
    "seq-mean-token-mean": "grpo",
    "seq-mean-token-sum-norm": "dr_grpo",
}
# Our learning-rate schedules after warmup and the transformers scheduler of each.
TRL_SCHEDULERS = {"constant": "constant_with_warmup", "cosine": "cosine", "linear": "linear"}


@dataclasses.dataclass(frozen=True)
class Race:
    """When each side evaluates and when it stops.

    Attributes:
      target: held-out accuracy (a fraction) at which a side stops.
      cap_s: training seconds (the paused clock) after which a side stops.
      eval_every: steps between held-out evaluations (also one before training, one at the end).
      max_steps: the most RL steps a side takes.
    """

    target: float
    cap_s: float
    eval_every: int
    max_steps: int

    def __post_init__(self):
        if not 0 < self.target <= 1:
            raise ValueError(f"--target={self.target} must be a fraction in (0, 1].")
        if self.cap_s <= 0 or self.eval_every < 1 or self.max_steps < 1:
            raise ValueError(f"{self}: cap_s must be > 0, eval_every and max_steps >= 1.")

    def evaluates_after(self, step: int, wall_s: float) -> bool:
        """Whether the policy after `step` steps (at `wall_s` training seconds) is evaluated."""
        return step % self.eval_every == 0 or wall_s >= self.cap_s or step >= self.max_steps

    def stop_reason(self, accuracy: float, wall_s: float, step: int) -> str | None:
        """Why a side stops after this evaluation ("target", "cap", "steps"), or None."""
        if accuracy >= self.target:
            return "target"
        if wall_s >= self.cap_s:
            return "cap"
        if step >= self.max_steps:
            return "steps"
        return None


class TrainingClock:
    """Training seconds since construction: a stopwatch that `paused()` stops.

    Example:
      >>> clock = TrainingClock()
      >>> with clock.paused():
      ...     evaluate()            # not counted
      >>> clock.elapsed()
    """

    def __init__(self, now: Callable[[], float] = time.perf_counter):
        self._now = now
        self._start = now()
        self._paused_s = 0.0

    def elapsed(self) -> float:
        """Seconds since construction, less the paused ones."""
        return self._now() - self._start - self._paused_s

    @contextlib.contextmanager
    def paused(self):
        """Stops the clock for the duration of the `with` block."""
        start = self._now()
        try:
            yield
        finally:
            self._paused_s += self._now() - start


@dataclasses.dataclass
class Curve:
    """One side's held-out accuracy against training time.

    Attributes:
      system: the side's name (`SYSTEMS`).
      points: {"step", "wall_s", "accuracy", "eval_s"} per evaluation, in order.
      stopped_by: "target", "cap" or "steps" (empty while running).
      peak_rss_gb: the side's process's peak resident memory.
      compilation_cache: our side's persistent compilation cache: "off", "cold" (empty at the
        start) or "warm" (filled by an earlier run); "" for a peer.
    """

    system: str
    points: list[dict] = dataclasses.field(default_factory=list)
    stopped_by: str = ""
    peak_rss_gb: float = float("nan")
    compilation_cache: str = ""

    def record(self, step: int, clock: TrainingClock, evaluate: Callable[[], float]) -> float:
        """Evaluates with the clock paused and appends the point; returns the accuracy."""
        wall_s = clock.elapsed()
        start = time.perf_counter()
        with clock.paused():
            accuracy = evaluate()
        self.add(step, wall_s, accuracy, time.perf_counter() - start)
        return accuracy

    def add(self, step: int, wall_s: float, accuracy: float, eval_s: float) -> None:
        """Appends a point and prints it."""
        self.points.append(dict(step=step, wall_s=wall_s, accuracy=accuracy, eval_s=eval_s))
        print(
            f"[{self.system}] step {step}: held-out accuracy {100 * accuracy:.1f}% at "
            f"{wall_s:.0f} s of training (evaluation {eval_s:.0f} s, not counted)",
            flush=True,
        )

    def time_to(self, level: float) -> float | None:
        """Training seconds at the first evaluation reaching `level`, None if none did."""
        return next((p["wall_s"] for p in self.points if p["accuracy"] >= level), None)

    @property
    def final_accuracy(self) -> float:
        """The last evaluation's accuracy."""
        return self.points[-1]["accuracy"]


class StopTraining(Exception):
    """Raised by `AccuracyCurveHook` to end our runner's loop at the target or the cap."""


def race_config(config_path: str, overrides: dict, race: Race):
    """The run config both sides follow: the file's config, `overrides`, and this benchmark's
    fields (steps, no checkpoints, no evaluation of the runner's own: the hook evaluates)."""
    from jaxrl_llm.config import apply_overrides
    from jaxrl_llm.stages import load_config

    config = load_config(config_path)
    apply_overrides(config, overrides)
    apply_overrides(
        config,
        {
            "train.num_steps": race.max_steps,
            "train.checkpoint_every": race.max_steps,
            "train.max_time_s": 0.0,
            "eval.before": False,
            "eval.after": False,
            "eval.every": 0,
            "eval.tasks": "",
            "eval.num_samples": 0,
        },
    )
    return config


def recipe_steps(config_path: str, overrides: dict) -> int:
    """The recipe's own `train.num_steps`: both sides' rate schedules run over a race's
    `max_steps`, so a race of more steps stretches a cosine (at step 34 of 1,000 it is still at
    0.997 of its peak)."""
    from jaxrl_llm.config import apply_overrides
    from jaxrl_llm.stages import load_config

    return apply_overrides(load_config(config_path), overrides).train.num_steps


def export_policy(config, export_dir: str) -> None:
    """Writes the config's initial policy (pretrained or random) as a Hugging Face directory."""
    from jaxrl_llm.models import save_hf
    from jaxrl_llm.runners.components import load_policy

    if config.model.lora.rank:
        raise ValueError("config.model.lora.rank must be 0: TRL's side trains every weight.")
    model, tokenizer = load_policy(config)
    save_hf(model, tokenizer, export_dir)


def from_export(config, export_dir: str):
    """`config` with its model read from the export (what both sides load)."""
    from jaxrl_llm.config import apply_overrides

    return apply_overrides(
        config.copy_and_resolve_references(),
        {"model.name": export_dir, "model.init": "pretrained"},
    )


def run_ours(
    config, export_dir: str, race: Race, workdir: str, cache_dir: str | None = None
) -> Curve:
    """Our GRPO runner (`jaxrl_llm.runners.train`) with `AccuracyCurveHook` as its evaluation;
    JAX's persistent compilation cache in `cache_dir`, or off (every compile counts)."""
    from jaxrl_llm.compilation_cache import use_compilation_cache
    from jaxrl_llm.runners import Hook, MetricsHook, NonFiniteGuard, train

    cache = use_compilation_cache(cache_dir)
    config = from_export(config, export_dir)
    curve = Curve(SYSTEMS["ours"], compilation_cache=cache)

    class AccuracyCurveHook(Hook):
        """Evaluates before the first step and as `race` says; stops the loop when it says."""

        def __init__(self, clock: TrainingClock):
            self.clock = clock

        def on_start(self, run):
            curve.record(0, self.clock, lambda: run.evaluate()["accuracy"])

        def on_step(self, run, record):
            if not race.evaluates_after(record.step, self.clock.elapsed()):
                return
            accuracy = curve.record(record.step, self.clock, lambda: run.evaluate()["accuracy"])
            reason = race.stop_reason(accuracy, curve.points[-1]["wall_s"], record.step)
            if reason:
                curve.stopped_by = reason
                raise StopTraining(reason)

    clock = TrainingClock()
    hooks = [
        MetricsHook(sample_every=config.train.sample_every),
        AccuracyCurveHook(clock),
        NonFiniteGuard(config.train.max_consecutive_nonfinite),
    ]
    with contextlib.suppress(StopTraining):
        train(config, workdir, progress=False, hooks=hooks)
    return curve


def trl_arguments(config, *, max_steps: int, output_dir: str, nearest: bool = False) -> dict:
    """`trl.GRPOConfig` keyword arguments mirroring the run config.

    With `nearest`, the recipe's fields TRL has no exact twin for take TRL's nearest counterpart
    (`trl_nearest`) instead of being refused.

    Raises:
      ValueError: naming a config field TRL's GRPOTrainer cannot mirror, and the fix.
    """
    loss, stabilise = config.loss, config.stabilise
    near_args, _ = trl_nearest(config) if nearest else ({}, [])
    refused = {
        "config.algorithm": (config.algorithm != "grpo", "'grpo'"),
        "config.loss.advantage": (loss.advantage != "grpo", "'grpo'"),
        "config.loss.agg": (loss.agg not in TRL_LOSS_TYPES, f"one of {sorted(TRL_LOSS_TYPES)}"),
        "config.loss.entropy_coef": (
            loss.entropy_coef != 0 and not nearest,
            "0, or pass --trl-nearest (TRL's own entropy bonus)",
        ),
        "config.loss.kl_estimator": (
            loss.kl_beta > 0 and loss.kl_estimator != "k3",
            "'k3' (TRL's KL estimator)",
        ),
        "config.train.num_minibatches": (config.train.num_minibatches != 1, "1"),
        "config.model.dtype": (config.model.dtype != "float32", "'float32'"),
        "config.optimizer.schedule": (
            config.optimizer.schedule not in TRL_SCHEDULERS,
            f"one of {sorted(TRL_SCHEDULERS)}",
        ),
        "config.stabilise.dynamic_sampling": (
            stabilise.dynamic_sampling and not nearest,
            "False, or pass --trl-nearest (TRL then trains on tied groups too)",
        ),
        "config.stabilise.overlong": (stabilise.overlong == "soft", "'none' or 'filter'"),
        "config.stabilise.entropy_target": (
            stabilise.entropy_target != 0 and not nearest,
            "0, or pass --trl-nearest (TRL's Skywork-OR1 adaptive entropy)",
        ),
        "config.stabilise.entropy_target_ratio": (
            stabilise.get("entropy_target_ratio", 0.0) != 0,
            "0 (TRL's adaptive entropy takes its target in nats: set entropy_target)",
        ),
        "config.stabilise.clip_cov_fraction": (
            stabilise.get("clip_cov_fraction", 0.0) != 0,
            "0 (TRL's GRPOTrainer has no Clip-Cov)",
        ),
        "config.off_policy.correction": (config.off_policy.correction != "none", "'none'"),
        "config.async_rl.enabled": (config.async_rl.enabled, "False"),
        "config.env.name": (bool(config.env.name), "'' (single-turn prompts)"),
        "config.rewards.model": (bool(config.rewards.model), "'' (no reward model)"),
        "config.rewards.process_model": (bool(config.rewards.process_model), "''"),
    }
    for field, (bad, fix) in refused.items():
        if bad:
            raise ValueError(f"{field} has no TRL GRPOTrainer twin here: set it to {fix}.")
    prompts, group = config.rollout.num_prompts, config.rollout.group_size
    opt = config.optimizer
    return dict(
        output_dir=output_dir,
        per_device_train_batch_size=prompts * group,  # one rollout batch, one optimizer update
        num_generations=group,
        max_completion_length=config.rollout.max_new_tokens,
        temperature=config.rollout.temperature,
        learning_rate=opt.learning_rate,
        lr_scheduler_type=TRL_SCHEDULERS[opt.schedule],
        warmup_steps=opt.warmup_steps,
        adam_beta1=opt.b1,
        adam_beta2=opt.b2,
        weight_decay=opt.weight_decay,
        max_grad_norm=opt.max_grad_norm,
        beta=loss.kl_beta,
        epsilon=loss.clip_low,
        epsilon_high=loss.clip_high,
        loss_type=TRL_LOSS_TYPES[loss.agg],
        scale_rewards="group" if loss.normalize_std else "none",
        mask_truncated_completions=stabilise.overlong == "filter",
        num_iterations=1,
        max_steps=max_steps,
        shuffle_dataset=False,  # the prompts come in our batcher's order
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        bf16=False,
        seed=config.seed,
        **near_args,
    )


def trl_nearest(config) -> tuple[dict, list[str]]:
    """TRL's nearest counterparts of the recipe's fields it has no exact twin for: (GRPOConfig
    keyword arguments, one line per difference, to be printed beside the result).

    - Dynamic sampling (DAPO sec. 3.2): TRL has none; it trains on every group, tied ones
      included (they carry no gradient under group advantages). Our resampling rounds are
      extra rollouts on our clock.
    - The entropy bonus: TRL's `entropy_coef` (the mean per-token entropy, as ours under
      token-mean aggregation). An adaptive one (`stabilise.entropy_target`) becomes TRL's
      adaptive entropy control (Skywork-OR1, arXiv:2505.22312): the same target, start, floor
      and ceiling, but its weight moves by +-`entropy_coef_delta` (here the floor) a step and
      counts only while entropy is at or under the target, where ours moves log(weight) by
      `entropy_rate` x the gap (SAC's rule) and always counts.
    """
    stabilise, loss = config.stabilise, config.loss
    args, differences = {}, []
    if stabilise.dynamic_sampling:
        differences.append(
            "dynamic sampling: ours resamples tied groups (at most "
            f"{stabilise.max_sampling_rounds} rollout rounds a step); TRL has none and trains "
            "on tied groups too"
        )
    if loss.entropy_coef:
        args["entropy_coef"] = loss.entropy_coef
    if stabilise.entropy_target:
        args.update(
            use_adaptive_entropy=True,
            entropy_target=stabilise.entropy_target,
            entropy_coef_min=stabilise.entropy_min_coef,
            entropy_coef_max=stabilise.entropy_max_coef,
            entropy_coef_delta=stabilise.entropy_min_coef,
        )
        differences.append(
            f"entropy weight: ours x exp({stabilise.entropy_rate:g} x (target - entropy)) a "
            f"step, always applied; TRL's +-{stabilise.entropy_min_coef:g} a step, applied only "
            f"at or under the target (both: target {stabilise.entropy_target:g} nats, weight "
            f"from {loss.entropy_coef:g} in [{stabilise.entropy_min_coef:g}, "
            f"{stabilise.entropy_max_coef:g}])"
        )
    return args, differences


def training_prompts(config, tokenizer, steps: int) -> tuple[list, list[str]]:
    """The examples of our batcher's first `steps` batches over the run's training pool, in
    order, and their chat prompts as our rollout renders them (what the peers are given)."""
    from jaxrl_llm.data import PromptBatcher
    from jaxrl_llm.data.presets import task_pool
    from jaxrl_llm.data.prompts import render_prompt

    task = config.task
    pool = task_pool(task, side="train", seed=config.seed)
    batcher = PromptBatcher(pool, batch_size=config.rollout.num_prompts, seed=config.seed)
    examples = [example for _ in range(steps) for example in next(batcher)]
    texts = [
        render_prompt(
            tokenizer,
            e.question,
            system_prompt=task.system_prompt,
            instruction_suffix=task.instruction_suffix,
        )
        for e in examples
    ]
    return examples, texts


def reward_by_index(config, examples: list) -> Callable[..., list[float]]:
    """`score(prompts, completions, indices)`: the run's reward (`build_rewards`, weights
    included) of each completion, its example named by its index in `examples`."""
    import numpy as np

    from jaxrl_llm.runners.components import build_rewards

    rewards = build_rewards(config)

    def score(prompts, completions, indices) -> list[float]:
        batch = [examples[int(i)] for i in indices]
        out = rewards(list(prompts), list(completions), batch)
        return np.asarray(out.total, np.float64).tolist()

    return score


def held_out_evaluator(config, export_dir: str):
    """(model, tokenizer, accuracy): our model and tokenizer loaded from the export, and a
    function giving the model's greedy held-out accuracy, decoded and scored as our runner's
    evaluation does (same settings, same questions, same scorer)."""
    from jaxrl_llm.evals import Evaluator
    from jaxrl_llm.models.hf import load_hf_directory
    from jaxrl_llm.runners.components import build_eval_sets, build_scorer
    from jaxrl_llm.runners.evaluation import eval_settings

    model, tokenizer = load_hf_directory(export_dir, dtype=config.model.dtype)
    evaluator = Evaluator(model, tokenizer, build_scorer(config), eval_settings(config))
    held_out = build_eval_sets(config, [config.task.name])[0]
    return model, tokenizer, lambda: evaluator.evaluate_set(held_out)["accuracy"]


def copy_torch_weights(policy, model) -> None:
    """Copies a transformers causal LM's weights into our `model` of the same architecture, in
    place (Hugging Face names and layouts, as our Hugging Face loader reads them)."""
    from jaxrl_llm.models.weights import assign_hf_tensors

    tensors = {name: t.detach().numpy() for name, t in policy.state_dict().items()}
    assign_hf_tensors(model, tensors, source="TRL's policy")


def run_trl(config, export_dir: str, race: Race, workdir: str, *, nearest: bool = False) -> Curve:
    """TRL's GRPOTrainer on the same recipe (`nearest`: `trl_arguments`); its policy is
    evaluated by our evaluator."""
    import datasets
    import torch
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(config.seed)
    eval_model, tokenizer, held_out_accuracy = held_out_evaluator(config, export_dir)
    curve = Curve(SYSTEMS["trl"])

    def accuracy_of(policy) -> float:
        """The held-out accuracy of TRL's current weights, copied into our model."""
        copy_torch_weights(policy, eval_model)
        return held_out_accuracy()

    clock = TrainingClock()
    examples, prompts = training_prompts(config, tokenizer, race.max_steps)
    dataset = datasets.Dataset.from_list(
        [{"prompt": text, "example_index": i} for i, text in enumerate(prompts)]
    )
    score = reward_by_index(config, examples)

    def task_reward(prompts, completions, example_index, **_):
        """Our reward of each completion."""
        return score(prompts, completions, example_index)

    policy = transformers.AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)

    class AccuracyCurveCallback(transformers.TrainerCallback):
        """Evaluates before the first step and as `race` says; stops training when it says."""

        def on_train_begin(self, args, state, control, **kwargs):
            curve.record(0, clock, lambda: accuracy_of(policy))

        def on_step_end(self, args, state, control, **kwargs):
            step = state.global_step
            if not race.evaluates_after(step, clock.elapsed()):
                return control
            accuracy = curve.record(step, clock, lambda: accuracy_of(policy))
            reason = race.stop_reason(accuracy, curve.points[-1]["wall_s"], step)
            if reason:
                curve.stopped_by = reason
                control.should_training_stop = True
            return control

    arguments = trl_arguments(config, max_steps=race.max_steps, output_dir=workdir, nearest=nearest)
    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=task_reward,
        args=GRPOConfig(**arguments),
        train_dataset=dataset,
        processing_class=transformers.AutoTokenizer.from_pretrained(export_dir),
        callbacks=[AccuracyCurveCallback()],
    )
    trainer.train()
    return curve


def race_level(curves: dict[str, Curve], target: float) -> float | None:
    """The accuracy the ratio is taken at: the target when TRL reached it, else TRL's best
    accuracy (its final one when TRL ends at its best; the best when it fell after it, so that a
    collapse does not set the level at its start); None without a TRL curve."""
    trl = curves.get(SYSTEMS["trl"])
    if trl is None:
        return None
    if trl.time_to(target) is not None:
        return target
    return max(p["accuracy"] for p in trl.points)


def ratio_line(ours: Curve, trl: Curve, level: float, what: str) -> str:
    """ "Time to LEVEL held-out (WHAT): ..." with ours' time over TRL's. A side that never
    reached the level within its run gives a bound: its time is at least its last training
    second (censored at its stop)."""
    ours_s, trl_s = ours.time_to(level), trl.time_to(level)
    ours_end, trl_end = ours.points[-1]["wall_s"], trl.points[-1]["wall_s"]
    if ours_s is not None and trl_s is not None:
        ratio = f"ratio {ours_s / trl_s:.2f} (ours {ours_s:.0f} s / TRL {trl_s:.0f} s)"
    elif ours_s is not None:
        ratio = (
            f"ratio below {ours_s / trl_end:.2f} (ours {ours_s:.0f} s; TRL did not reach it "
            f"in its {trl_end:.0f} s)"
        )
    elif trl_s is not None:
        ratio = (
            f"ratio above {ours_end / trl_s:.2f} (TRL {trl_s:.0f} s; ours did not reach it "
            f"in its {ours_end:.0f} s)"
        )
    else:
        ratio = "neither side reached it"
    note = ""
    if trl_s is not None and trl_s == trl.points[0]["wall_s"]:
        note = " TRL's level is its start: the ratio compares load times, not learning."
    return f"Time to {_percent(level)} held-out ({what}): {ratio}.{note}"


def report(curves: dict[str, Curve], race: Race) -> list[str]:
    """The printed lines: a summary table, every curve's points, and the ratio to TRL: at the
    target, and at TRL's best accuracy when TRL did not reach the target. A time is that of the
    first evaluation at or above the level, so it can be late by up to `eval_every` steps."""
    level = race_level(curves, race.target)
    level_name = "TRL's level" if level is None else _percent(level)
    lines = [
        "| system | steps | stopped by | start | final | best | time to target s "
        f"| time to {level_name} s | train s | evaluation s (not counted) | peak RSS GB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, curve in curves.items():
        accuracies = [p["accuracy"] for p in curve.points]
        lines.append(
            f"| {name} | {curve.points[-1]['step']} | {curve.stopped_by} "
            f"| {_percent(accuracies[0])} | {_percent(accuracies[-1])} "
            f"| {_percent(max(accuracies))} | {_seconds(curve.time_to(race.target))} "
            f"| {'-' if level is None else _seconds(curve.time_to(level))} "
            f"| {curve.points[-1]['wall_s']:.0f} | {sum(p['eval_s'] for p in curve.points):.0f} "
            f"| {curve.peak_rss_gb:.1f} |"
        )
    lines += ["", "| system | step | train s | held-out accuracy |", "|---|---|---|---|"]
    for name, curve in curves.items():
        lines += [
            f"| {name} | {p['step']} | {p['wall_s']:.0f} | {_percent(p['accuracy'])} |"
            for p in curve.points
        ]
    ours, trl = curves.get(SYSTEMS["ours"]), curves.get(SYSTEMS["trl"])
    if ours is not None and trl is not None:
        lines += ["", ratio_line(ours, trl, race.target, "the target")]
        if level != race.target:
            final = "final" if level == trl.final_accuracy else "best, not its final"
            lines.append(ratio_line(ours, trl, level, f"TRL's {final} accuracy"))
    return lines


def plot(curves: dict[str, Curve], race: Race, path: str) -> None:
    """Held-out accuracy against training minutes, one line per side, the target dashed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    for name, curve in curves.items():
        minutes = [p["wall_s"] / 60 for p in curve.points]
        ax.plot(minutes, [100 * p["accuracy"] for p in curve.points], "-o", label=name)
    ax.axhline(100 * race.target, color="grey", linestyle="--", label="target")
    ax.set_xlabel("training wall time, minutes (load and compiles in, evaluation out)")
    ax.set_ylabel("held-out greedy accuracy, %")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.0f}"


def run_side(args, race: Race) -> None:
    """A child process: the export, or one side, printing its curve as a result line."""
    from machine import peak_rss_bytes

    config = race_config(args.config, _overrides(args.set), race)
    if args.side == "export":
        export_policy(config, args.export_dir)
        print("SYSTEM_RESULT {}", flush=True)
        return
    if args.side == "tunix":
        from time_to_accuracy_tunix import run_tunix

        side = functools.partial(run_tunix, tunix_python=args.tunix_python)
    elif args.side == "trl":
        side = functools.partial(run_trl, nearest=args.trl_nearest)
    else:  # "ours"
        side = functools.partial(run_ours, cache_dir=args.compilation_cache)
    with tempfile.TemporaryDirectory() as workdir:
        curve = side(config, args.export_dir, race, workdir)
    if math.isnan(curve.peak_rss_gb):  # Tunix's is its training process's, reported by it
        curve.peak_rss_gb = peak_rss_bytes() / 1e9
    print("SYSTEM_RESULT " + json.dumps(dataclasses.asdict(curve)), flush=True)


def _overrides(pairs: list[str]) -> dict:
    from jaxrl_llm.launch.plan import parse_value

    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set {pair!r}: write key=value, e.g. --set rollout.group_size=8")
        overrides[key] = parse_value(value)
    return overrides


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="the recipe (a config file)")
    parser.add_argument("--set", action="append", default=[], help="key=value config override")
    parser.add_argument(
        "--target",
        type=float,
        default=0.25,
        help="held-out accuracy to reach (the main job goes 9.0%% -> 40.5%% over 3 seeds, README)",
    )
    parser.add_argument("--cap-min", type=float, default=60.0, help="training minutes per side")
    parser.add_argument("--eval-every", type=int, default=5, help="steps between evaluations")
    parser.add_argument(
        "--max-steps",
        type=int,
        help="most steps per side (default: the config's train.num_steps, so that a decaying "
        "rate decays as in the recipe; more steps stretch its schedule over them)",
    )
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument(
        "--trl-nearest",
        action="store_true",
        help="give TRL its nearest counterpart of a field it has no twin for (dynamic sampling: "
        "none; an adaptive entropy weight: its Skywork-OR1 control), the differences printed",
    )
    parser.add_argument("--skip-ours", action="store_true")
    parser.add_argument(
        "--compilation-cache",
        metavar="DIR",
        help="our side with JAX's persistent compilation cache in DIR (empty: 'cold', the first "
        "run; filled by an earlier run: 'warm', a user's second); default off",
    )
    parser.add_argument("--tunix-python", help="a Python with google-tunix: adds Tunix")
    parser.add_argument("--out", default="time_to_accuracy", help="writes OUT.png and OUT.json")
    parser.add_argument("--side", choices=["export", *SYSTEMS], help=argparse.SUPPRESS)
    parser.add_argument("--export-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.max_steps is None:  # the children are given the resolved value
        args.max_steps = recipe_steps(args.config, _overrides(args.set))
    race = Race(args.target, 60 * args.cap_min, args.eval_every, args.max_steps)
    if args.side:
        run_side(args, race)
        return

    from machine import benchmark_header, run_for_result

    print(benchmark_header("time_to_accuracy.py"), flush=True)
    print("# command: python " + " ".join(sys.argv), flush=True)
    config = race_config(args.config, _overrides(args.set), race)  # a bad config fails here
    skipped = {"ours": args.skip_ours, "trl": args.skip_trl, "tunix": not args.tunix_python}
    differences = []
    if not args.skip_trl:
        trl_arguments(config, max_steps=race.max_steps, output_dir="", nearest=args.trl_nearest)
        differences = trl_nearest(config)[1] if args.trl_nearest else []
        for line in differences:
            print(f"# TRL's side differs: {line}", flush=True)
    sides = [side for side in SYSTEMS if not skipped[side]]
    curves = {}
    with tempfile.TemporaryDirectory() as tmp:
        export_dir = os.path.join(tmp, "export")
        child = [sys.executable, os.path.abspath(__file__), *sys.argv[1:]]
        child += ["--max-steps", str(race.max_steps), "--export-dir", export_dir, "--side"]
        if run_for_result(child + ["export"], "SYSTEM_RESULT", "export") is None:
            raise SystemExit("exporting the initial policy failed")
        for side in sides:
            result = run_for_result(child + [side], "SYSTEM_RESULT", SYSTEMS[side])
            if result is not None:
                curves[SYSTEMS[side]] = Curve(**result)
    if not curves:
        raise SystemExit("no side finished")
    load = os.getloadavg()[0]
    print(
        f"\nHeld-out greedy accuracy against training wall time ({args.config}"
        f"{''.join(' --set ' + s for s in args.set)}); target {_percent(race.target)}, cap "
        f"{args.cap_min:g} min a side, evaluated every {race.eval_every} steps; each side in "
        f"its own process, one after the other; load average at the end {load:.1f}"
    )
    ours = curves.get(SYSTEMS["ours"])
    if ours is not None:
        print(f"Our side's persistent compilation cache: {ours.compilation_cache}")
    print("\n".join(report(curves, race)))
    if differences:
        print("\nWhere TRL's side differs from the recipe (--trl-nearest):")
        print("\n".join(f"- {line}" for line in differences))
    with open(args.out + ".json", "w") as f:
        json.dump({name: dataclasses.asdict(c) for name, c in curves.items()}, f, indent=1)
    plot(curves, race, args.out + ".png")
    print(f"\nWrote {args.out}.png and {args.out}.json")


if __name__ == "__main__":
    main()
