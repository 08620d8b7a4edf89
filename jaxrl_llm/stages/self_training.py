"""Self-training from the verifier's accepted samples: ReST-EM and rejection-sampling fine-tuning.

    python -m jaxrl_llm.main --config experiments/configs/rest_em_smollm2.py --workdir runs/rest_em
    python -m jaxrl_llm.main --config experiments/configs/raft_smollm2.py --workdir runs/raft

Each iteration has two steps. E-step: the current policy samples `samples_per_prompt`
completions of `num_prompts` training prompts (the next ones of the training pool), the task's
verifier scores them, and the accepted ones (reward >= `threshold`; up to `max_per_prompt`
distinct ones a prompt) become (prompt, completion) SFT records. M-step: `steps_per_iteration`
updates of the masked next-token loss (`jaxrl_llm.training.sft`) on them, starting

  - "rest_em": from the base model every iteration (ReST-EM, "Beyond Human Data: Scaling
    Self-Training for Problem-Solving with Language Models", 2312.06585), so each iteration's
    policy is the base fine-tuned on the latest policy's accepted samples;
  - "raft": from the previous iteration's policy (RAFT, "RAFT: Reward rAnked FineTuning for
    Generative Foundation Model Alignment", 2304.06767), which keeps the best-rewarded samples
    of each batch of prompts and continues fine-tuning on them.

The optimizer state restarts every iteration. Each iteration reports its accepted fraction
(accepted samples / samples) and the held-out greedy accuracy after its M-step; the run reports
the accuracy before the first. Files: `<workdir>/iteration_<i>/accepted.jsonl` (the E-step's
records, reread on resume), `iteration_<i>/checkpoints` and `metrics.jsonl` (the M-step,
resumed within an iteration), `iteration_<i>/done.json`, and `<workdir>/metrics.jsonl` with one
row per iteration (step = iteration). `train.max_time_s` stops after the iteration whose
E-step and M-step seconds (evaluations excluded) pass it, for equal-time comparisons.
"""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from jaxrl_llm.checkpoint import Checkpointer, abstract_like
from jaxrl_llm.data.jsonl import write_jsonl
from jaxrl_llm.data.presets import resolve_task, task_pool
from jaxrl_llm.data.sft import SftRecord, read_sft_jsonl
from jaxrl_llm.metrics import MetricsWriter
from jaxrl_llm.runners.components import load_policy, with_lora
from jaxrl_llm.stages.data import RecordBatches
from jaxrl_llm.stages.parts import (
    GreedyEvaluation,
    check_positive_ints,
    stage_config,
    stage_learner,
)
from jaxrl_llm.stages.sampling import sample_groups
from jaxrl_llm.stages.supervised import fit, save_policy, write_config, write_summary
from jaxrl_llm.training.sft import sft_loss

METHODS = ("rest_em", "raft")


def self_training_section() -> ml_collections.ConfigDict:
    """The `config.self_training` fields."""
    c = ml_collections.ConfigDict()
    # "rest_em" (every M-step starts from the base model) or "raft" (continues).
    c.method = "rest_em"
    c.iterations = 3  # E-step + M-step rounds
    c.num_prompts = 128  # training prompts sampled per E-step (the next ones of the pool)
    c.samples_per_prompt = 8  # k completions per prompt
    c.max_per_prompt = 4  # distinct accepted completions kept per prompt (ReST-EM caps them)
    c.threshold = 1.0  # a completion is accepted when its verifier reward is >= this
    c.temperature = 0.7
    c.max_new_tokens = 64
    c.steps_per_iteration = 20  # M-step optimizer updates
    c.batch_size = 16  # records per update
    c.max_length = 256  # tokens per record (prompt + completion)
    c.pack = True  # several records per packed row
    c.pack_row_multiple = 4
    return c


def self_training_config(method: str = "rest_em") -> ml_collections.ConfigDict:
    """The default ReST-EM (or RAFT) configuration (SmolLM2-135M-Instruct, chain_sum)."""
    return stage_config("self_training", "self_training", self_training_section(), method=method)


def validate_self_training_config(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first bad field of a self-training config, and the fix."""
    s = config.self_training
    if s.method not in METHODS:
        raise ValueError(f"config.self_training.method={s.method!r} must be one of {METHODS}.")
    positive = (
        "iterations",
        "num_prompts",
        "samples_per_prompt",
        "max_per_prompt",
        "max_new_tokens",
        "steps_per_iteration",
        "batch_size",
        "max_length",
        "pack_row_multiple",
    )
    check_positive_ints(config, "self_training", positive)
    if not s.temperature > 0:
        raise ValueError(
            f"config.self_training.temperature={s.temperature} must be > 0 (the E-step samples)."
        )
    if config.train.max_time_s < 0:
        raise ValueError(f"config.train.max_time_s={config.train.max_time_s} must be >= 0.")
    resolve_task(config.task.name, config.task.kwargs.to_dict())


def accepted_records(
    questions: list[str], completions: list[list[str]], scores_ng: np.ndarray, *, threshold: float,
    most: int,
) -> list[SftRecord]:  # fmt: skip
    """The (question, completion) records of every accepted completion: reward >= `threshold`,
    distinct non-empty texts, at most `most` per question, in sampling order.

    Example:
      >>> accepted_records(["q"], [["a", "b", "a"]], np.array([[1.0, 0.0, 1.0]]), threshold=1.0,
      ...                  most=4)
      [SftRecord(prompt='q', response='a')]
    """
    records = []
    for question, group, scores in zip(questions, completions, scores_ng, strict=True):
        kept = [c for c, s in zip(group, scores, strict=True) if s >= threshold and c.strip()]
        records += [SftRecord(question, c) for c in list(dict.fromkeys(kept))[:most]]
    return records


class SelfTrainingRun:
    """One ReST-EM / RAFT run: the policy `Learner`, the base weights, the prompt pool and the
    held-out evaluation."""

    def __init__(self, config, workdir: str):
        self.config, self.workdir = config, workdir
        s, task = config.self_training, config.task
        self.model, self.tokenizer = load_policy(config)
        self.model = with_lora(self.model, config)  # LoRA when config.model.lora.rank > 0
        loss = functools.partial(sft_loss, remat=config.train.remat)
        self.learner = stage_learner(self.model, config, loss, num_steps=s.steps_per_iteration)
        # ReST-EM's M-steps start from these; RAFT needs no copy
        self.base_params = None
        if s.method == "rest_em":
            self.base_params = jax.tree.map(jax.numpy.copy, self.learner.params)
        self.pool = task_pool(task, side="train", seed=config.seed)
        self._task_metrics = GreedyEvaluation(config, self.model, self.tokenizer)
        self.use_records([])

    def accuracy(self) -> dict[str, float]:
        """Held-out greedy metrics of the current policy (`config.eval`)."""
        return self._task_metrics(self.learner.params)

    def prompts(self, iteration: int) -> list:
        """The E-step prompts of `iteration`: the next `num_prompts` of the training pool."""
        n = self.config.self_training.num_prompts
        return [self.pool[(iteration * n + i) % len(self.pool)] for i in range(n)]

    def e_step(self, iteration: int) -> tuple[list[SftRecord], dict[str, float]]:
        """Samples and scores the iteration's prompts with the current policy; returns the
        accepted records and the E-step's figures."""
        s = self.config.self_training
        examples = self.prompts(iteration)
        _, completions, scores = sample_groups(
            self.config,
            self.model,
            self.tokenizer,
            examples,
            group_size=s.samples_per_prompt,
            max_new_tokens=s.max_new_tokens,
            temperature=s.temperature,
            params=self.learner.params,
            seed=self.config.seed + 1_000_003 * (iteration + 1),
        )
        questions = [e.question for e in examples]
        records = accepted_records(
            questions, completions, scores, threshold=s.threshold, most=s.max_per_prompt
        )
        accepted = scores >= s.threshold
        stats = {
            "accepted_fraction": float(accepted.mean()),
            "prompts_with_accepted": float(accepted.any(axis=1).mean()),
            "records": float(len(records)),
        }
        return records, stats

    def use_records(self, records: list[SftRecord]) -> None:
        """The records the next M-step trains on (`batch(step)` draws from them)."""
        self.batch = RecordBatches(
            records, self.tokenizer, self.learner, self.config, self.config.self_training
        )

    def restore_iteration(self, directory: str) -> None:
        """The policy at the end of a finished iteration (its last M-step checkpoint)."""
        checkpointer = Checkpointer(os.path.join(directory, "checkpoints"))
        try:
            restored = checkpointer.restore_latest(abstract_like(self.learner.state))
        finally:
            checkpointer.close()
        if restored is None:
            raise ValueError(
                f"{directory}: done.json says the iteration finished but no checkpoint "
                "restores; delete the directory to redo the iteration."
            )
        self.learner.state = restored[0]


def _read_json(path: str) -> dict[str, Any] | None:
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def _write_json(path: str, value: dict[str, Any]) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=2)
    os.replace(path + ".tmp", path)  # a kill mid-write leaves the old file or none


def _write_records(path: str, records: list[SftRecord]) -> None:
    write_jsonl(path, ({"prompt": r.prompt, "response": r.response} for r in records))


def train_self_training(config: ml_collections.ConfigDict, workdir: str, *, progress: bool = True):
    """Validates the config, then runs (or resumes) ReST-EM or RAFT (`run_self_training`)."""
    validate_self_training_config(config)
    return run_self_training(config, workdir, progress=progress)


def run_self_training(config: ml_collections.ConfigDict, workdir: str, *, progress: bool = True):
    """Runs (or resumes) ReST-EM or RAFT on a validated config; returns its summary (also
    `<workdir>/summary.json`)."""
    write_config(config, workdir)
    s = config.self_training
    start_time = time.time()
    run = SelfTrainingRun(config, workdir)
    before = _read_json(os.path.join(workdir, "before.json"))
    if before is None:
        before = run.accuracy()
        _write_json(os.path.join(workdir, "before.json"), before)
    writer = MetricsWriter.for_run(config, workdir)
    iterations, finished_dir, trained_here = [], None, False
    try:
        for i in range(s.iterations):
            directory = os.path.join(workdir, f"iteration_{i}")
            os.makedirs(directory, exist_ok=True)
            done = _read_json(os.path.join(directory, "done.json"))
            if done is None:
                if finished_dir is not None and not trained_here:  # resumed: newest policy
                    run.restore_iteration(finished_dir)
                done = _iteration(run, i, directory, progress=progress)
                trained_here = True
                writer.write_scalars(i + 1, {f"iteration/{k}": v for k, v in done.items()})
            iterations.append(done)
            finished_dir = directory
            spent = sum(it["e_step_s"] + it["m_step_s"] for it in iterations)
            if config.train.max_time_s and spent > config.train.max_time_s and i + 1 < s.iterations:
                print(f"[jaxrl_llm] stopping after iteration {i + 1}: train.max_time_s spent")
                break
        if finished_dir is not None and not trained_here:  # every iteration was done before
            run.restore_iteration(finished_dir)
    finally:
        writer.close()
    save_policy(run, os.path.join(workdir, "model"))
    after = {"accuracy": iterations[-1]["accuracy"]} if iterations else before
    summary = {
        "stage": "self_training",
        "method": s.method,
        "iterations": iterations,
        "eval_before": before,
        "eval_after": after,
        "train_time_s": sum(it["e_step_s"] + it["m_step_s"] for it in iterations),
        "wall_time_s": time.time() - start_time,
        "model": os.path.join(workdir, "model"),
    }
    write_summary(workdir, summary)
    print(
        f"[jaxrl_llm] {s.method}: held-out greedy accuracy {100 * before['accuracy']:.1f}% -> "
        f"{100 * after['accuracy']:.1f}% after {len(iterations)} iterations; accepted fraction "
        + ", ".join(f"{100 * it['accepted_fraction']:.1f}%" for it in iterations)
    )
    return summary


def _iteration(run: SelfTrainingRun, i: int, directory: str, *, progress: bool) -> dict:
    """E-step (or its saved records) then M-step of iteration `i`; returns its done.json."""
    s = run.config.self_training
    t0 = time.time()
    path = os.path.join(directory, "accepted.jsonl")
    stats = _read_json(os.path.join(directory, "e_step.json"))
    if stats is None:
        records, stats = run.e_step(i)
        stats["e_step_s"] = time.time() - t0
        if records:
            _write_records(path, records)
        _write_json(os.path.join(directory, "e_step.json"), stats)
    records = read_sft_jsonl(path) if stats["records"] else []
    t1 = time.time()
    if not records:  # nothing accepted: the policy stays as it is for this iteration
        print(f"[jaxrl_llm] iteration {i + 1}: no accepted completion; M-step skipped")
        checkpointer = Checkpointer(os.path.join(directory, "checkpoints"))
        try:  # the iteration's policy, for a resumed run to restore
            checkpointer.save(0, run.learner.state, {"step": 0})
        finally:
            checkpointer.close()
        t_eval = time.time()
        metrics = run.accuracy()
        eval_s = time.time() - t_eval
    else:
        start = run.base_params if s.method == "rest_em" else run.learner.params
        run.learner.reset(start)
        run.use_records(records)

        eval_s = 0.0

        def evaluate(when: str) -> dict[str, float]:
            nonlocal eval_s
            if when != "after":
                return {}
            t_eval = time.time()
            result = {f"eval/{k}": v for k, v in run.accuracy().items()}
            eval_s += time.time() - t_eval
            return result

        _, after = fit(
            run.learner,
            run.batch,
            evaluate,
            workdir=directory,
            num_steps=s.steps_per_iteration,
            checkpoint_every=s.steps_per_iteration,
            desc=f"{s.method} {i + 1}/{s.iterations}",
            progress=progress,
        )
        metrics = {k.removeprefix("eval/"): v for k, v in after.items()}
    done = {
        "iteration": i + 1,
        **stats,
        "accuracy": metrics["accuracy"],
        "m_step_s": time.time() - t1 - eval_s,  # updates only
        "eval_s": eval_s,
        "seconds": time.time() - t0,
    }
    _write_json(os.path.join(directory, "done.json"), done)
    return done
