"""The loop of the supervised stages (SFT, reward models): updates of one `Learner` on batches
indexed by step, held-out evaluation before, every N steps and after, checkpoints and resume.

    before, after = fit(learner, batch_of_step, evaluate, workdir=..., num_steps=100,
                        checkpoint_every=20, eval_every=20, desc="SFT")

`batch_of_step(step)` must be a function of the step alone (a resumed run draws the same
batches), `evaluate(when)` ("before", "during" or "after") returns a flat dict of held-out floats. The evaluation before training is
checkpointed with the state, so a resumed run reports the same "before".
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np
import tqdm

from jaxrl_llm.checkpoint import Checkpointer, abstract_like
from jaxrl_llm.metrics import MetricsWriter
from jaxrl_llm.roles import Learner


def fit(
    learner: Learner,
    batch_of_step: Callable[[int], Any],
    evaluate: Callable[[str], dict[str, float]],
    *,
    workdir: str,
    num_steps: int,
    checkpoint_every: int,
    eval_every: int = 0,
    desc: str = "train",
    progress: bool = True,
    max_time_s: float = 0.0,
) -> tuple[dict[str, float], dict[str, float]]:
    """Trains `learner` to `num_steps` updates (resuming from `workdir/checkpoints`); writes
    `train/*` metrics every step and `evaluate(when)` at step 0, every `eval_every` steps (0: never
    in between) and at the end to `workdir/metrics.jsonl`. With `max_time_s` > 0 it stops (and
    saves) after the first update that ends past that many seconds of updates in this process
    (evaluations excluded). Returns (before, after)."""
    checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"))
    restored = checkpointer.restore_latest(abstract_like(learner.state))
    meta: dict[str, Any] = {"step": 0, "before": None}
    if restored is not None:
        learner.state, meta = restored
        print(f"[jaxrl_llm] resumed from step {meta['step']}")
    writer = MetricsWriter(workdir)
    if meta["before"] is None:
        meta["before"] = evaluate("before")
        writer.write_scalars(0, meta["before"])
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
            writer.write_scalars(step + 1, scalars)
            meta["step"] = step + 1
            if (step + 1) % checkpoint_every == 0 or step + 1 == num_steps or out_of_time:
                checkpointer.save(step + 1, learner.state, meta)
            bar.set_postfix(loss=f"{scalars['train/loss']:.3f}")
            bar.update(1)
            if out_of_time:
                print(f"[jaxrl_llm] stopping after update {step + 1}: {max_time_s} s spent")
                break
        after = evaluate("after")
        writer.write_scalars(meta["step"], after)
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


def step_indices(seed: int, step: int, batch_size: int, count: int) -> np.ndarray:
    """The `batch_size` example indices of update `step`: consecutive slices of a permutation
    of range(count) drawn anew each epoch from (seed, epoch), so a resumed run draws the same.

    Example:
      >>> step_indices(0, 0, 4, 10).shape
      (4,)
    """
    epoch, start = divmod(step * batch_size, count)
    order = np.random.default_rng([seed, epoch]).permutation(count)
    return np.resize(np.roll(order, -start), batch_size)


def padded_width(lengths, *, limit: int, multiple: int = 16) -> int:
    """The one row width of a stage's batches: the longest row rounded up to `multiple`, at
    most `limit` (the config's max_length). Padding every row to the limit instead costs a
    short-sequence task like chain_sum (about 70 tokens a pair) over 3x the compute.

    Example:
      >>> padded_width([40, 70], limit=256)
      80
    """
    return min(limit, -(-max(lengths) // multiple) * multiple)


def split_by_group(groups: list, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Indices (held out, training) of items whose `groups` keys (e.g. prompt texts) are split
    so that no key has items on both sides: about `fraction` of the distinct keys, at least
    one and (given two keys) at most all but one, are held out, chosen by a permutation seeded
    with `seed`. Several pairs (or completions) of one prompt, or a prompt the task repeats,
    thus never leak from training into the held-out figure."""
    keys = list(dict.fromkeys(groups))
    order = np.random.default_rng(seed).permutation(len(keys))
    count = min(max(1, int(round(fraction * len(keys)))), max(1, len(keys) - 1))  # both sides
    held_keys = {keys[i] for i in order[:count]}
    held = [i for i, g in enumerate(groups) if g in held_keys]
    train = [i for i, g in enumerate(groups) if g not in held_keys]
    return held, train


def sample_groups(
    config,
    policy,
    tokenizer,
    examples: list,
    *,
    group_size: int,
    max_new_tokens: int,
    temperature: float,
    params=None,
    seed: int | None = None,
) -> tuple[list[str], list[list[str]], np.ndarray]:
    """`group_size` sampled completions of each example's chat prompt, scored by the task's
    verifier (`config.rewards`' "task" function): the labels of the stages that learn from the
    policy's own samples (reward-model pairs, ReST-EM / RAFT's E-step).

    Args:
      config: the stage config (`task` renders the prompts, `rewards` scores).
      policy, tokenizer: the sampling model and its tokenizer.
      examples: N task `Example`s.
      group_size, max_new_tokens, temperature: G samples per prompt and how they are drawn.
      params: the policy's parameters to sample with (None: the model's own).
      seed: the base sampling seed (None: `config.seed`); decode call c uses seed + its first
        prompt's index, so a rerun draws the same samples.

    Returns:
      (rendered prompt texts [N], completions [N][G], verifier scores float32 [N, G]).
    """
    from jaxrl_llm.rollout.chat import chat_generator, completion_texts, prompt_ids
    from jaxrl_llm.runners import components

    task, seed = config.task, config.seed if seed is None else seed
    texts, ids = prompt_ids(
        tokenizer,
        examples,
        system_prompt=task.system_prompt,
        instruction_suffix=task.instruction_suffix,
    )
    generator = chat_generator(
        policy, tokenizer, max_new_tokens=max_new_tokens, temperature=temperature
    )
    rewards = components.build_rewards(config)
    completions, scores = [], []
    chunk = max(1, 64 // group_size)  # prompts per decode call (at most 64 rows)
    for start in range(0, len(examples), chunk):
        batch = range(start, min(start + chunk, len(examples)))
        group_ids = [ids[i] for i in batch for _ in range(group_size)]
        rollout = generator(group_ids, seed=seed + start, params=params)
        texts_out = completion_texts(tokenizer, rollout)
        group_texts = [texts[i] for i in batch for _ in range(group_size)]
        group_examples = [examples[i] for i in batch for _ in range(group_size)]
        scores.append(rewards(group_texts, texts_out, group_examples).per_function["task"])
        completions += [texts_out[j : j + group_size] for j in range(0, len(texts_out), group_size)]
    scores_ng = np.concatenate(scores).reshape(len(examples), group_size).astype(np.float32)
    return texts, completions, scores_ng


def write_config(config, workdir: str) -> None:
    """Creates `workdir` and writes the stage's `config.json` there."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort(indent=2))


def write_summary(workdir: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Writes `summary.json` (a finished stage: the pipeline skips it); returns `summary`."""
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


def stage_learner(model, config, loss: Callable[..., Any], *, num_steps: int) -> Learner:
    """A supervised stage's `Learner` of `model`: `loss(model, batch)` minimised by the config's
    optimizer (its schedule spread over `num_steps` updates) on the placement's train mesh."""
    from jaxrl_llm.roles import make_placement
    from jaxrl_llm.runners.components import build_optimizer

    mesh = make_placement(config.placement).train_mesh
    return Learner(model, build_optimizer(config.optimizer, num_steps), loss, mesh)


def greedy_evaluation(config, model, tokenizer, eval_set=None) -> Callable[[Any], dict[str, float]]:
    """`params -> metrics`: the held-out greedy evaluation (`config.eval`, scored by
    `config.rewards`) of `eval_set`, by default the run's task's held-out prompts
    (`components.build_eval_sets`). One `Evaluator` serves every call, so the decode compiles
    once per run."""
    from jaxrl_llm.evals import Evaluator
    from jaxrl_llm.runners import components
    from jaxrl_llm.runners.online_sync import eval_settings

    if eval_set is None:
        (eval_set,) = components.build_eval_sets(config, [config.task.name])
    rewards = components.build_rewards(config)
    evaluator = Evaluator(model, tokenizer, rewards, eval_settings(config))

    def metrics(params) -> dict[str, float]:
        return evaluator([eval_set], params=params)[eval_set.name]

    return metrics


def scalar_head_learner(policy, config, loss_fn: Callable[..., Any]):
    """A reward-model stage's model and its `Learner`: a `ScalarHeadModel` on `policy`'s trunk
    with a fresh head, trained by `loss_fn(model, batch, *, remat)` with the config's optimizer,
    placement and gradient checkpointing (`config.train.remat`).

    Returns:
      (the ScalarHeadModel, its Learner).
    """
    import functools

    from jaxrl_llm.models.heads import ScalarHeadModel

    model = ScalarHeadModel.from_policy(policy, seed=config.seed, head_init="normal")
    loss = functools.partial(loss_fn, remat=config.train.remat)
    return model, stage_learner(model, config, loss, num_steps=config.train.num_steps)


def fit_stage(
    run, config, workdir: str, evaluate: Callable[[str], dict[str, float]], *, eval_every: int,
    desc: str, progress: bool,
) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
    """`fit` of a stage's `run.learner` on `run.batch`, with the config's steps, checkpoint
    interval and time budget (`train.num_steps`, `checkpoint_every`, `max_time_s`)."""
    return fit(
        run.learner,
        run.batch,
        evaluate,
        workdir=workdir,
        num_steps=config.train.num_steps,
        checkpoint_every=config.train.checkpoint_every,
        eval_every=eval_every,
        desc=desc,
        progress=progress,
        max_time_s=config.train.max_time_s,
    )


def fit_scalar_model(
    run, config, workdir: str, *, name: str, eval_every: int, desc: str, progress: bool
) -> tuple[dict[str, float], dict[str, float], str]:
    """`fit` of a reward-model stage's run (its `learner`, `batch`, `evaluate` and
    `ScalarHeadModel` `model`), then the trained model saved to `<workdir>/<name>`.

    Returns:
      (evaluation before, evaluation after, the saved model's directory).
    """
    from flax import nnx

    from jaxrl_llm.models.heads import save_scalar_model

    before, after = fit_stage(
        run, config, workdir, run.evaluate, eval_every=eval_every, desc=desc, progress=progress
    )
    nnx.update(run.model, run.learner.params)
    directory = os.path.join(workdir, name)
    save_scalar_model(run.model, directory)
    return before, after, directory


def stage_config(stage: str, section: str, fields: ml_collections.ConfigDict):
    """A locked stage config: the base fields, `stage`, and the stage's section `fields`
    (100 updates at learning rate 1e-5 unless the caller changes them)."""
    from jaxrl_llm.config import base_config

    c = base_config()
    c.stage = stage
    c[section] = fields
    c.train.num_steps = 100
    c.optimizer.learning_rate = 1e-5
    c.lock()
    return c


def check_positive_ints(config, section: str, fields: tuple[str, ...]) -> None:
    """Raises ValueError naming the first of `config.<section>.<field>` that is not an integer
    >= 1."""
    for field in fields:
        value = config[section][field]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.{section}.{field}={value!r} must be a positive integer.")


def fit_policy(
    run, config, workdir: str, held_out: Callable[[], dict[str, float]], *, eval_every: int,
    desc: str, progress: bool,
) -> tuple[dict[str, float], dict[str, float], str]:  # fmt: skip
    """`fit` of a stage that trains the policy itself (SFT, offline preference): `held_out()`
    at every evaluation, plus the task's held-out greedy metrics (`run.task_accuracy()`, as
    "eval/task/<metric>") before and after when `config.eval.before` / `.after` ask; then the
    policy (`run.model`, `run.tokenizer`) saved as a Hugging Face directory `<workdir>/model`.

    Returns:
      (evaluation before, evaluation after, the saved policy's directory).
    """
    from flax import nnx

    from jaxrl_llm.models.hf import save_hf

    def evaluate(when: str) -> dict[str, float]:
        scalars = held_out()
        if {"before": config.eval.before, "after": config.eval.after}.get(when, False):
            task = run.task_accuracy() or {}
            scalars.update({f"eval/task/{k}": v for k, v in task.items() if _is_number(v)})
        return scalars

    before, after = fit_stage(
        run, config, workdir, evaluate, eval_every=eval_every, desc=desc, progress=progress
    )
    nnx.update(run.model, run.learner.params)
    directory = os.path.join(workdir, "model")
    save_hf(run.model, run.tokenizer, directory)
    return before, after, directory


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_sampled_labels_section(config, section: str, positive: tuple[str, ...]) -> None:
    """The checks a reward-model stage's section shares (labels from the policy's samples):
    the `positive` fields are positive integers, `eval_fraction` in (0, 1), `temperature` > 0,
    `eval_every` >= 0, `train.num_steps` >= 1. Raises ValueError naming the field."""
    s = config[section]
    check_positive_ints(config, section, positive)
    if not 0 < s.eval_fraction < 1:
        raise ValueError(f"config.{section}.eval_fraction={s.eval_fraction} must be in (0, 1).")
    if not s.temperature > 0:
        raise ValueError(
            f"config.{section}.temperature={s.temperature} must be > 0 (labels need samples)."
        )
    if not isinstance(s.eval_every, int) or s.eval_every < 0:
        raise ValueError(f"config.{section}.eval_every={s.eval_every!r} must be an integer >= 0.")
    if not isinstance(config.train.num_steps, int) or config.train.num_steps < 1:
        raise ValueError(f"config.train.num_steps={config.train.num_steps!r} must be >= 1.")
