"""The skeleton of the supervised stages: fit, evaluate, checkpoint, save and summarise.

A stage that trains one model on a fixed data set (SFT, the reward model, the process reward
model, offline preference optimisation) is a `SupervisedStage`: its own parts as small
functions. `train_stage` runs every one of them the same way:

    validate(config) -> <workdir>/config.json -> build(config, workdir): a `StageRun`
    -> fit: updates of `run.learner` on `run.batch(step)`; `run.evaluate(when)` before, every
       `config.<section>.eval_every` steps and after; checkpoints every
       `train.checkpoint_every` steps, resumed from the newest; `train.max_time_s` budget
    -> save(run, <workdir>/<output>) -> <workdir>/summary.json -> report(summary), printed

Self-training (ReST-EM, RAFT: `stages.self_training`) runs `fit` once per iteration, for
its M-step.

    before, after = fit(learner, batch_of_step, evaluate, workdir=..., num_steps=100,
                        checkpoint_every=20, eval_every=20, desc="SFT")

`batch_of_step(step)` must be a function of the step alone (a resumed run draws the same
batches), `evaluate(when)` ("before", "during" or "after") returns a flat dict of held-out
floats. The evaluation before training is checkpointed with the state, so a resumed run
reports the same "before".
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import ml_collections
import tqdm

from jaxrl_llm.checkpoint import Checkpointer, abstract_like, saves_left
from jaxrl_llm.host import accelerator_info, host_info
from jaxrl_llm.metrics import MetricsWriter
from jaxrl_llm.roles import Learner
from jaxrl_llm.runners.lifecycle import check_resumable

__all__ = [
    "StageRun",
    "SupervisedStage",
    "fit",
    "save_policy",
    "save_scalar_head",
    "run_validated_stage",
    "train_stage",
    "update_seconds",
    "write_config",
    "write_summary",
]


class StageRun(Protocol):
    """What a stage's `build` returns: a model, its learner, its data and its evaluation."""

    model: Any  # the trained model's structure (`save` writes it with the learner's params)
    tokenizer: Any
    learner: Learner

    def batch(self, step: int) -> Any:
        """Update `step`'s placed batch (a function of the step alone)."""

    def evaluate(self, when: str) -> dict[str, float]:
        """Held-out metrics ("before", "during" or "after" training)."""

    def summary(self) -> dict[str, Any]:
        """The stage's own fields of `summary.json` (its data's counts, its loss type)."""


class SupervisedStage(NamedTuple):
    """A supervised stage as its parts (see the module docstring).

    Attributes:
      name: the stage (`config.stage`, `summary["stage"]`).
      section: the config section with the stage's fields (and `eval_every`).
      validate: `config -> None`, raises ValueError naming a bad field.
      build: `(config, workdir) -> StageRun`: loads the model, makes or reads the data.
      save: `(run, directory) -> None`: writes the trained model (`save_policy`,
        `save_scalar_head`).
      output: the saved model's directory under the workdir, and its summary key.
      report: `summary -> str`, the line printed at the end.
      desc: `config -> str`, the progress bar's label.
    """

    name: str
    section: str
    validate: Callable[[ml_collections.ConfigDict], None]
    build: Callable[[ml_collections.ConfigDict, str], StageRun]
    save: Callable[[StageRun, str], None]
    output: str
    report: Callable[[dict[str, Any]], str]
    desc: Callable[[ml_collections.ConfigDict], str]


def train_stage(
    stage: SupervisedStage,
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    progress: bool = True,
) -> dict[str, Any]:
    """Validates `config` for `stage`, then runs (or resumes) it (`run_validated_stage`)."""
    stage.validate(config)
    return run_validated_stage(stage, config, workdir, progress=progress)


def run_validated_stage(
    stage: SupervisedStage,
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    progress: bool = True,
) -> dict[str, Any]:
    """Runs (or resumes) `stage` on a config its `validate` passed (`train_stage` validates,
    `jaxrl_llm.stages.load_config` does for the command line); returns its summary (also
    `<workdir>/summary.json`).

    The summary holds the stage, the updates done ("steps"), the stage's own fields
    (`run.summary()`), the evaluations before and after, "train_time_s" (updates, evaluations
    and saving), "update_time_s" (updates alone, over every process that wrote the workdir),
    "wall_time_s" (from loading the model on), the machine ("host": its CPU, and its chip on an
    accelerator) and the saved model's directory under `stage.output`.
    """
    write_config(config, workdir)
    start = time.time()
    run = stage.build(config, workdir)
    train_start = time.time()
    before, after = fit(
        run.learner,
        run.batch,
        run.evaluate,
        workdir=workdir,
        num_steps=config.train.num_steps,
        checkpoint_every=config.train.checkpoint_every,
        keep_checkpoints=config.train.keep_checkpoints,
        eval_every=config[stage.section].eval_every,
        desc=stage.desc(config),
        progress=progress,
        max_time_s=config.train.max_time_s,
        config=config,
        eval_records=getattr(run.evaluate, "take_records", None),
    )
    directory = os.path.join(workdir, stage.output)
    stage.save(run, directory)
    summary = {
        "stage": stage.name,
        "steps": int(run.learner.state.step),
        **run.summary(),
        "before": before,
        "after": after,
        "train_time_s": time.time() - train_start,
        "update_time_s": update_seconds(workdir),
        "wall_time_s": time.time() - start,
        "host": {**host_info(), **accelerator_info()},
        stage.output: directory,
    }
    write_summary(workdir, summary)
    print(stage.report(summary))
    return summary


def fit(
    learner: Learner,
    batch_of_step: Callable[[int], Any],
    evaluate: Callable[[str], dict[str, float]],
    *,
    workdir: str,
    num_steps: int,
    checkpoint_every: int,
    keep_checkpoints: int = 3,
    eval_every: int = 0,
    desc: str = "train",
    progress: bool = True,
    max_time_s: float = 0.0,
    config: ml_collections.ConfigDict | None = None,
    eval_records: Callable[[], tuple[dict, dict]] | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Trains `learner` to `num_steps` updates (resuming from `workdir/checkpoints`); writes
    `train/*` metrics every step and `evaluate(when)` at step 0, every `eval_every` steps (0: never
    in between) and at the end to `workdir/metrics.jsonl`. With `max_time_s` > 0 it stops (and
    saves) after the first update that ends past that many seconds of updates in this process
    (evaluations excluded). The newest `keep_checkpoints` checkpoints are kept; a disk that cannot
    hold those still to come stops it before the first evaluation (`CheckpointSpaceError`).
    `config` (the run's) says where metrics go besides the JSONL files (`config.metrics`; None:
    TensorBoard). `eval_records()` (a `PolicyEvaluation`'s `take_records`) gives the per-question
    records of the evaluation just run, kept in `workdir/eval_questions.jsonl`. Returns (before,
    after)."""
    checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=keep_checkpoints)
    restored = checkpointer.restore_latest(abstract_like(learner.state))
    meta: dict[str, Any] = {"step": 0, "before": None}
    if restored is not None:
        learner.state, meta = restored
        print(f"[jaxrl_llm] resumed from step {meta['step']}")
    checkpointer.ensure_space(
        learner.state, saves=saves_left(meta["step"], num_steps=num_steps, every=checkpoint_every)
    )
    writer = MetricsWriter(workdir) if config is None else MetricsWriter.for_run(config, workdir)
    writer.rewind(meta["step"] if restored is not None else -1)  # log each step once

    def log_evaluation(step: int, scalars: dict[str, float]) -> None:
        writer.write_scalars(step, scalars)
        if eval_records is not None:
            writer.write_eval_questions(step, *eval_records())

    if meta["before"] is None:
        meta["before"] = evaluate("before")
        log_evaluation(0, meta["before"])
    bar = tqdm.tqdm(total=num_steps, initial=meta["step"], desc=desc, disable=not progress)
    spent = 0.0
    try:
        for step in range(meta["step"], num_steps):
            t0 = time.time()
            metrics = jax.device_get(learner.update(batch_of_step(step)))
            update_s = time.time() - t0
            spent += update_s
            scalars = {f"train/{k}": float(v) for k, v in metrics.items()}
            scalars["time/update_s"] = update_s
            out_of_time = bool(max_time_s) and spent > max_time_s
            if eval_every and (step + 1) % eval_every == 0 and step + 1 < num_steps:
                scalars.update(evaluate("during"))
            log_evaluation(step + 1, scalars)
            meta["step"] = step + 1
            if (step + 1) % checkpoint_every == 0 or step + 1 == num_steps or out_of_time:
                checkpointer.save(step + 1, learner.state, meta)
            bar.set_postfix(loss=f"{scalars['train/loss']:.3f}")
            bar.update(1)
            if out_of_time:
                print(f"[jaxrl_llm] stopping after update {step + 1}: {max_time_s} s spent")
                break
        after = evaluate("after")
        log_evaluation(meta["step"], after)
    finally:
        bar.close()
        checkpointer.close()
        writer.close()
    return meta["before"], after


def update_seconds(workdir: str) -> float:
    """Seconds the updates of a `fit` run took, over every process that wrote `workdir` (the
    last row of each step counts: a resumed run rewrites the steps it redoes)."""
    from jaxrl_llm.metrics import read_metrics

    last = {r["step"]: r["time/update_s"] for r in read_metrics(workdir) if "time/update_s" in r}
    return float(sum(last.values()))


def save_policy(run: StageRun, directory: str) -> None:
    """Writes the trained policy (`run.model` with the learner's parameters, `run.tokenizer`)
    as a Hugging Face directory, which the next stage loads with `config.model.name`."""
    from flax import nnx

    from jaxrl_llm.models.hf import save_hf

    nnx.update(run.model, run.learner.params)
    save_hf(run.model, run.tokenizer, directory)


def save_scalar_head(run: StageRun, directory: str) -> None:
    """Writes a trained reward model (`run.model`, a `ScalarHeadModel`, with the learner's
    parameters), which the RL stage's reward role loads (`config.rewards.model`)."""
    from flax import nnx

    from jaxrl_llm.models.heads import save_scalar_model

    nnx.update(run.model, run.learner.params)
    save_scalar_model(run.model, directory)


def write_config(config, workdir: str) -> None:
    """Creates `workdir` and writes the stage's `config.json` there, after refusing a workdir
    whose checkpoints another run wrote (`lifecycle.check_resumable`)."""
    os.makedirs(workdir, exist_ok=True)
    check_resumable(config, workdir)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort(indent=2))


def write_summary(workdir: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Writes `summary.json` (a finished stage: the pipeline skips it); returns `summary`."""
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary
