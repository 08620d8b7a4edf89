"""The synchronous GRPO loop on one mesh: rollout -> rewards -> advantages -> updates, repeated.

Colocated like HybridFlow's hybrid engine: the same parameters serve the jitted decode program
and the jitted train step. Each step is reproducible from (seed, step, data position, train
state), which is everything a checkpoint stores, so a killed run resumes with the same metrics.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

import jax
import ml_collections
import numpy as np
import tqdm
from flax import nnx

from jaxrl_llm import gin_bindings
from jaxrl_llm.algorithms.grpo import (
    GRPOLossConfig,
    build_batch,
    group_advantages,
    grpo_loss,
    pack_batch,
    split_minibatches,
)
from jaxrl_llm.checkpoint import Checkpointer, abstract_like
from jaxrl_llm.config import validate_config
from jaxrl_llm.metrics import MetricsWriter
from jaxrl_llm.rewards import accuracy
from jaxrl_llm.runners.components import build_parts
from jaxrl_llm.runners.evaluation import (
    chat_generator,
    completion_texts,
    greedy_accuracy,
    prompt_ids,
)
from jaxrl_llm.training import create_train_state, make_train_step, sequence_logprobs

log = logging.getLogger(__name__)

# Metrics that measure wall time; they differ between runs and are left out of comparisons.
# Metrics that depend on the process, not on the run's seed: wall times, and whether this step
# compiled the train step for a new batch shape (a resumed process compiles again).
TIME_KEYS = (
    "time/rollout_s",
    "time/reward_s",
    "time/train_s",
    "time/step_s",
    "time/new_train_shape",
)


class NonFiniteLossError(RuntimeError):
    """Too many consecutive steps had a non-finite loss or gradient."""


def rollout_seed(seed: int, step: int) -> int:
    """The sampling seed of RL step `step` (row b then uses fold_in(key(seed), b))."""
    return (seed * 1_000_003 + step) % (2**31 - 1)


def _loss_config(config) -> GRPOLossConfig:
    loss = config.loss
    # gin bindings (`GRPOLossConfig.clip_low = ...`) win over these config values.
    return gin_bindings.configured(
        GRPOLossConfig,
        clip_low=loss.clip_low,
        clip_high=loss.clip_high,
        kl_beta=loss.kl_beta,
        kl_estimator=loss.kl_estimator,
        entropy_coef=loss.entropy_coef,
        agg=loss.agg,
        norm_len=config.rollout.max_new_tokens if loss.agg == "seq-mean-token-sum-norm" else None,
        temperature=config.rollout.temperature,
        remat=config.train.remat,
    )


def _mean_metrics(rows: list[dict[str, Any]]) -> dict[str, float]:
    keys = rows[0].keys()
    return {k: float(np.mean([float(r[k]) for r in rows])) for k in keys}


def train(
    config: ml_collections.ConfigDict, workdir: str, *, progress: bool = True
) -> dict[str, Any]:
    """Runs GRPO as configured, resuming from `workdir`'s latest checkpoint if there is one.

    Writes `metrics.jsonl`, `samples.jsonl`, TensorBoard events, `checkpoints/` and, at the end,
    `summary.json` (accuracy before and after, wall time) into `workdir`.

    Args:
      config: a config from `jaxrl_llm.config.grpo_config` (validated here).
      workdir: the run directory.
      progress: show a tqdm progress bar.

    Returns:
      The summary dict.
    """
    validate_config(config)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort(indent=2))
    start_time = time.time()
    parts = build_parts(config)
    model, tokenizer, rewards = parts.model, parts.tokenizer, parts.rewards
    graphdef, state = create_train_state(model, parts.optimizer)
    loss_config = _loss_config(config)
    advantage_kwargs = gin_bindings.resolve(  # `group_advantages.estimator = ...` wins
        "group_advantages", estimator=config.loss.advantage, normalize_std=config.loss.normalize_std
    )
    train_step = make_train_step(
        graphdef, parts.optimizer, lambda m, b: grpo_loss(m, b, config=loss_config)
    )
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"))
    writer = MetricsWriter(workdir)
    summary_path = os.path.join(workdir, "summary.json")
    meta: dict[str, Any] = {"step": 0, "data": parts.batcher.state(), "eval_before": None}

    restored = ckpt.restore_latest(abstract_like(state))
    if restored is not None:
        state, meta = restored
        parts.batcher.restore(meta["data"])
        print(f"[jaxrl_llm] resumed from {ckpt.directory} at step {meta['step']}")

    ref_params = None
    if config.loss.kl_beta > 0:
        # The frozen reference is the initial policy; on resume it is reloaded from the model files.
        ref_params = jax.tree.map(lambda x: x.copy(), nnx.state(model, nnx.Param))

    @jax.jit
    def reference_logprobs(params, batch):
        ref_model = nnx.merge(graphdef, params)
        return sequence_logprobs(
            ref_model,
            batch.tokens,
            temperature=config.rollout.temperature,
            positions_bt=batch.positions,
            segment_ids_bt=batch.segment_ids,
        )[0]

    eval_kwargs = dict(
        min_prompt_bucket=config.rollout.min_prompt_bucket,
        max_new_tokens=config.eval.max_new_tokens,
        batch_size=config.eval.batch_size,
        system_prompt=config.task.system_prompt,
        instruction_suffix=config.task.instruction_suffix,
    )
    eval_examples = list(parts.eval_source)
    if config.eval.before and meta.get("eval_before") is None:
        t0 = time.time()
        meta["eval_before"] = greedy_accuracy(
            model, tokenizer, eval_examples, rewards, params=state.params, **eval_kwargs
        )
        writer.write_scalars(0, {f"eval/{k}": v for k, v in meta["eval_before"].items()})
        print(
            f"[jaxrl_llm] held-out greedy accuracy before training: "
            f"{100 * meta['eval_before']['accuracy']:.1f}% on {len(eval_examples)} prompts "
            f"({time.time() - t0:.0f}s)"
        )

    group = config.rollout.group_size
    generator = chat_generator(
        model,
        tokenizer,
        max_new_tokens=config.rollout.max_new_tokens,
        temperature=config.rollout.temperature,
        min_prompt_bucket=config.rollout.min_prompt_bucket,
    )
    consecutive_nonfinite = 0
    train_shapes_seen: set[tuple[int, ...]] = set()  # a new one compiles the train step
    bar = tqdm.trange(
        meta["step"],
        config.train.num_steps,
        initial=meta["step"],
        total=config.train.num_steps,
        desc="GRPO",
        disable=not progress,
        dynamic_ncols=True,
    )
    for step in bar:
        t_step = time.time()
        examples = next(parts.batcher)
        texts, ids = prompt_ids(
            tokenizer,
            examples,
            system_prompt=config.task.system_prompt,
            instruction_suffix=config.task.instruction_suffix,
        )
        group_texts = [t for t in texts for _ in range(group)]
        group_examples = [e for e in examples for _ in range(group)]
        rollout = generator(
            [i for i in ids for _ in range(group)],
            seed=rollout_seed(config.seed, step),
            params=state.params,
        )
        completions = completion_texts(tokenizer, rollout)
        t_reward = time.time()
        reward_out = rewards(group_texts, completions, group_examples)
        t_train = time.time()
        advantages = group_advantages(reward_out.total, group, **advantage_kwargs)
        batch = build_batch(rollout, advantages)
        if config.train.pack_sequences:
            batch, _ = pack_batch(
                batch,
                np.asarray(rollout.sequence_lengths),
                row_multiple=config.train.num_minibatches * config.train.pack_row_multiple,
                width=max(config.train.pack_width, batch.tokens.shape[1]),
            )
        if ref_params is not None:
            batch = batch._replace(ref_logp=reference_logprobs(ref_params, batch))
        new_shape = batch.tokens.shape not in train_shapes_seen
        train_shapes_seen.add(batch.tokens.shape)
        step_metrics = []
        for minibatch in split_minibatches(batch, config.train.num_minibatches):
            state, m = train_step(state, minibatch)
            step_metrics.append(m)
        step_metrics = _mean_metrics(jax.device_get(step_metrics))
        t_end = time.time()

        rewards_bg = reward_out.total.reshape(-1, group)
        scalars = {
            "reward/mean": float(np.mean(reward_out.total)),
            "reward/accuracy": accuracy(reward_out.per_function["task"]),
            "reward/zero_std_groups": float(np.mean(rewards_bg.std(axis=1) == 0)),
            "reward/errors": float(sum(reward_out.num_errors.values())),
            "reward/timeouts": float(sum(reward_out.num_timeouts.values())),
            "completion/length": float(np.mean(np.asarray(rollout.lengths))),
            "completion/eos_fraction": float(np.mean(np.asarray(rollout.finish_reason) != 0)),
            "train/rows": float(batch.tokens.shape[0]),
            "time/new_train_shape": float(new_shape),
            **{f"train/{k}": v for k, v in step_metrics.items()},
            "time/rollout_s": t_reward - t_step,
            "time/reward_s": t_train - t_reward,
            "time/train_s": t_end - t_train,
            "time/step_s": t_end - t_step,
        }
        writer.write_scalars(step + 1, scalars)
        if config.train.sample_every and (step + 1) % config.train.sample_every == 0:
            writer.write_samples(
                step + 1,
                [
                    {
                        "prompt": examples[i // group].question,
                        "completion": completions[i],
                        "reward": float(reward_out.total[i]),
                        "answer": examples[i // group].answer,
                    }
                    for i in range(0, len(completions), group)
                ],
            )
        bar.set_postfix(
            reward=f"{scalars['reward/mean']:.2f}",
            acc=f"{scalars['reward/accuracy']:.2f}",
            kl=f"{step_metrics.get('kl_ref', step_metrics['approx_kl']):.4f}",
            ent=f"{step_metrics['entropy']:.2f}",
            len=f"{scalars['completion/length']:.0f}",
            t=f"{scalars['time/rollout_s']:.0f}/{scalars['time/reward_s']:.0f}/{scalars['time/train_s']:.0f}s",
        )

        if step_metrics["nonfinite"] >= 1.0:  # every minibatch of the step was skipped
            consecutive_nonfinite += 1
            log.warning("Step %d: non-finite loss or gradient; the update was skipped.", step + 1)
            print(f"[jaxrl_llm] warning: step {step + 1} had a non-finite loss; update skipped")
            if consecutive_nonfinite >= config.train.max_consecutive_nonfinite:
                writer.close()
                ckpt.close()
                raise NonFiniteLossError(
                    f"{consecutive_nonfinite} consecutive steps had a non-finite loss or gradient "
                    f"(config.train.max_consecutive_nonfinite={config.train.max_consecutive_nonfinite}); "
                    f"stopping. The last good checkpoint in {ckpt.directory} is kept; lower "
                    "config.optimizer.learning_rate or check the rewards."
                )
            continue
        consecutive_nonfinite = 0
        meta.update(step=step + 1, data=parts.batcher.state())
        last = step + 1 == config.train.num_steps
        if (step + 1) % config.train.checkpoint_every == 0 or last:
            ckpt.save(step + 1, state, meta)
    bar.close()

    summary: dict[str, Any] = {"steps": meta["step"], "eval_before": meta.get("eval_before")}
    if config.eval.after:
        summary["eval_after"] = greedy_accuracy(
            model, tokenizer, eval_examples, rewards, params=state.params, **eval_kwargs
        )
        writer.write_scalars(
            meta["step"], {f"eval/{k}": v for k, v in summary["eval_after"].items()}
        )
    summary["wall_time_s"] = time.time() - start_time
    with open(summary_path, "w") as f:
        json.dump(summary, f, indent=2)
    writer.close()
    ckpt.close()
    before, after = summary.get("eval_before"), summary.get("eval_after")
    if before and after:
        print(
            f"[jaxrl_llm] held-out greedy accuracy: before {100 * before['accuracy']:.1f}% -> "
            f"after {100 * after['accuracy']:.1f}% ({len(eval_examples)} prompts, "
            f"{summary['wall_time_s'] / 60:.1f} min in this process)"
        )
    return summary
