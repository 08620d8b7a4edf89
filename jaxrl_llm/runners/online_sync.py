"""The synchronous online runner: collect -> process -> update, repeated, for any algorithm.

    summary = train(config, workdir)                  # the algorithm is config.algorithm
    summary = train(config, workdir, algorithm=mine)  # or any `Algorithm` value

Each step: sync the actor's weights to the rollout (reshard to the decode layout), sample G
completions per prompt, score them (reward role), add what the algorithm's roles provide
(reference log-probs, critic values, a greedy baseline), let the algorithm build the train batch
(`make_batch`), then run the actor's (and critic's) jitted updates over minibatches and the
algorithm's `update`. Checkpoints, evaluation, metrics, progress and the non-finite guard are
hooks (`jaxrl_llm.runners.hooks`). Nothing here knows a particular algorithm.

Each step is reproducible from (seed, step, data position, state), which is everything a
checkpoint stores, so a killed run resumes with the same metrics. SIGTERM stops the run after the
current step, with a checkpoint of it (`StopSignal`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxrl_llm import algorithms
from jaxrl_llm.algorithms.base import Algorithm, Experience, References
from jaxrl_llm.algorithms.batch import pack_batch, split_minibatches
from jaxrl_llm.algorithms.off_policy import OffPolicyConfig
from jaxrl_llm.config import validate_config
from jaxrl_llm.evals import EvalSettings, Evaluator, describe_held_out
from jaxrl_llm.host import host_info
from jaxrl_llm.metrics import MetricsWriter
from jaxrl_llm.models.partitioning import use_layout
from jaxrl_llm.rewards import accuracy
from jaxrl_llm.rewards.process import dense_step_rewards
from jaxrl_llm.roles import place_batch
from jaxrl_llm.roles.reference import logprob_fn
from jaxrl_llm.rollout.chat import completion_texts, prompt_ids, response_rows
from jaxrl_llm.rollout.inflight import WeightsSource
from jaxrl_llm.runners.components import (
    Roles,
    RunParts,
    build_eval_sets,
    build_parts,
    build_roles,
)
from jaxrl_llm.runners.hooks import Hook, StepRecord, default_hooks
from jaxrl_llm.runners.lifecycle import StopSignal, check_resumable
from jaxrl_llm.runners.pipeline import PipelineError
from jaxrl_llm.runners.stabilisers import StepStabilisers
from jaxrl_llm.sharding import layout


def _violations(reward_out) -> np.ndarray | None:
    """float32 [K, B] verdicts of the reward role's judges (per_function "judge/<name>", in
    order), or None without judges."""
    rows = [v for k, v in reward_out.per_function.items() if k.startswith("judge/")]
    return np.stack(rows).astype(np.float32) if rows else None


def _mean_of_verdicts(values: np.ndarray) -> float:
    """Mean over the non-NaN entries (0.0 when there are none)."""
    values = np.asarray(values, np.float64)
    known = values[~np.isnan(values)]
    return float(known.mean()) if known.size else 0.0


def rollout_seed(seed: int, step: int) -> int:
    """The sampling seed of RL step `step` (row b then uses fold_in(key(seed), b))."""
    return (seed * 1_000_003 + step) % (2**31 - 1)


def eval_settings(config: ml_collections.ConfigDict) -> EvalSettings:
    """The `EvalSettings` of a run config's `eval` section (prompt format from `task`)."""
    c = config
    return EvalSettings(
        max_new_tokens=c.eval.max_new_tokens,
        num_slots=c.eval.batch_size,
        num_samples=c.eval.num_samples,
        ks=tuple(c.eval.ks),
        temperature=c.eval.temperature,
        seed=c.seed,
        min_prompt_bucket=c.rollout.min_prompt_bucket,
        continuous=c.eval.continuous,
        system_prompt=c.task.system_prompt,
        instruction_suffix=c.task.instruction_suffix,
    )


def _work_metrics(work) -> dict[str, float]:
    """The rollout's computed prefill and decode work against the plain engine's."""
    return {
        "rollout/prefill_tokens": float(work.prefill_tokens),
        "rollout/prefill_tokens_plain": float(work.prefill_tokens_plain),
        "rollout/decode_row_steps": float(work.decode_row_steps),
        "rollout/decode_row_steps_plain": float(work.decode_row_steps_plain),
        **{f"rollout/{k}": v for k, v in work.saved().items()},
    }


def _mean_metrics(rows: list[dict[str, Any]], prefix: str) -> dict[str, float]:
    rows = jax.device_get(rows)
    return {f"{prefix}/{k}": float(np.mean([float(r[k]) for r in rows])) for k in rows[0]}


def state_tree(roles: Roles, algo_state: Any) -> dict[str, Any]:
    """The pytree a checkpoint holds: actor (and critic) train states and the algorithm's state."""
    tree = {"actor": roles.actor.state, "algorithm": algo_state}
    if roles.critic is not None:
        tree["critic"] = roles.critic.state
    return tree


class Generated(NamedTuple):
    """One RL step's prompts, samples and rewards, on the host: what the generator produces.

    Attributes:
      examples: the step's prompts (`Example`s), each sampled G times.
      rollout: the sampled `Rollout` (numpy), B = prompts x G rows.
      completions: [B] decoded completion texts.
      reward_out: the reward role's `RewardOutput` of every row.
      baseline_rewards: float32 [B] greedy-baseline rewards (ReMax), else None.
      work: the rollout's `DecodeWork`.
      seconds: {"rollout": sampling (and baseline) seconds, "reward": scoring seconds}.
      versions_bt: int32 [B, T] weight version of each completion token (-1 elsewhere) of a
        rollout with in-flight updates (the weights may change between decode chunks); else
        None (one version, the batch's).
      references: the prompts' gold answers as completions (`Algorithm.reference_template`).
      episodes: the `jaxrl_llm.envs.EpisodeBatch` of multi-turn episodes (`config.env`), whose
        `rollout` is `rollout`; None for single-turn rollouts.
      scalars: metrics of how the step's samples were collected (the stabilisers': sampling
        rounds, kept groups, overlong shaping), logged with the step; None for none.
    """

    examples: list
    rollout: Any
    completions: list[str]
    reward_out: Any
    baseline_rewards: np.ndarray | None
    work: Any
    seconds: dict[str, float]
    versions_bt: np.ndarray | None = None
    references: References | None = None
    episodes: Any = None
    scalars: dict[str, float] | None = None


class OnlineRun:
    """One online run's state and the hook-facing `RunContext` (see `jaxrl_llm.runners.hooks`).

    Attributes:
      config, workdir, algorithm, parts, roles: what the run is made of.
      algo_state: the algorithm's state (`Algorithm.init`), checkpointed with the roles' states.
      meta: JSON metadata checkpointed beside the state: step, data position, eval_before.
      summary: what `train` returns and writes to summary.json.
    """

    def __init__(self, config, workdir: str, algorithm: Algorithm, parts: RunParts, roles: Roles):
        self.config, self.workdir, self.algorithm = config, workdir, algorithm
        self.parts, self.roles = parts, roles
        self.algo_state = algorithm.init()
        self.meta: dict[str, Any] = {"step": 0, "data": parts.batcher.state(), "eval_before": None}
        self.summary: dict[str, Any] = {}
        self.writer = MetricsWriter(workdir)
        self.init_evaluation()
        pad_id = parts.tokenizer.pad_token_id or 0
        self.stabilisers = StepStabilisers(
            config, pad_id=pad_id, meta=self.meta, vocab_size=parts.tokenizer.vocab_size
        )
        self._train_shapes: set[tuple[int, ...]] = set()
        self._off_policy = OffPolicyConfig.from_config(config)
        self._proximal = None  # the actor's jitted log-prob forward, built on first use

    def init_evaluation(self) -> None:
        """Builds the held-out sets (`eval_sets`, the run's task first) and their evaluator."""
        self.eval_sets = build_eval_sets(self.config)
        self.eval_correct: dict[str, Any] = {}  # per-question correctness of the last evaluation
        self.evaluator = Evaluator(  # decodes with the rollout's weights, so its graph
            self.roles.rollout.decode_model,
            self.parts.tokenizer,
            self.roles.reward.without_judges(),
            eval_settings(self.config),
        )

    # -- RunContext ---------------------------------------------------------------------------
    def state_tree(self) -> dict[str, Any]:
        """Everything that changes during training, as one pytree (what checkpoints hold)."""
        return state_tree(self.roles, self.algo_state)

    def load_state_tree(self, tree: dict[str, Any]) -> None:
        """Puts a restored `state_tree()` back into the roles (`train` restores the data position
        from `meta`)."""
        self.roles.actor.state = tree["actor"]
        self.algo_state = tree["algorithm"]
        if self.roles.critic is not None:
            self.roles.critic.state = tree["critic"]

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics of the current actor (`jaxrl_llm.evals`), decoded by the rollout
        role: the training task's unprefixed (accuracy, score, ...), each `config.eval.tasks`
        entry's as "<task>/<metric>", and the seconds it took."""
        t0 = time.time()
        rollout = self.roles.rollout
        rollout.sync(self.roles.actor.params)
        results = self.evaluator(self.eval_sets, params=rollout.params)
        self.eval_correct = dict(self.evaluator.correct)
        rollout.release()
        result = dict(results.pop(self.config.task.name))
        for name, metrics in results.items():
            result.update({f"{name}/{k}": v for k, v in metrics.items()})
        result["seconds"] = time.time() - t0
        return result

    # -- what runs beside the loop (the asynchronous runner's generator; nothing here) -------
    def start_pipeline(self) -> None:
        """Called once the run is restored, before the first step."""

    def close_pipeline(self) -> None:
        """Called when the loop ends, normally or not."""

    def fail(self, error: BaseException) -> None:
        """Called when the loop raises `error`."""

    # -- one step -----------------------------------------------------------------------------
    def generate(self, step: int, params, *, weights: WeightsSource | None = None) -> Generated:
        """Everything the rollout side does for RL step `step`, on the host: one or more
        rounds of `generate_round` (dynamic sampling), shaped by the run's stabilisers
        (`jaxrl_llm.runners.stabilisers`)."""
        generated, scalars = self.stabilisers.collect(
            lambda r: self.generate_round(step, params, weights=weights, round_index=r)
        )
        return generated._replace(scalars=scalars)

    def generate_round(
        self, step: int, params, *, weights: WeightsSource | None = None, round_index: int = 0
    ) -> Generated:
        """The prompts of the next batch, sampled with `params` (decode layout) and scored.
        With `weights` (a source of the newest (version, params)), the sampling takes newer
        weights between decode chunks (`config.async_rl.inflight_updates`); a greedy baseline
        uses `params`. Round r > 0 of a step (dynamic sampling) samples with the seed of step
        `step + r * num_steps`, one no step of the run uses."""
        c, roles, tokenizer = self.config, self.roles, self.parts.tokenizer
        group = c.rollout.group_size
        t0 = time.time()
        examples = next(self.parts.batcher)
        texts, ids = prompt_ids(
            tokenizer,
            examples,
            system_prompt=c.task.system_prompt,
            instruction_suffix=c.task.instruction_suffix,
        )
        group_ids = [i for i in ids for _ in range(group)]
        seed = rollout_seed(c.seed, step + round_index * c.train.num_steps)
        versions_bt = None
        if weights is None:
            rollout = roles.rollout.sample(group_ids, seed=seed, params=params)
        else:
            inflight = roles.rollout.sample_inflight(
                group_ids,
                seed=seed,
                weights=weights,
                chunk_tokens=c.async_rl.inflight_chunk_tokens,
            )
            rollout, versions_bt = inflight.rollout, inflight.versions_bt
        baseline = (
            roles.rollout.greedy(ids, params=params) if self.algorithm.baseline_rollout else None
        )
        work = jax.device_get(roles.rollout.last_work)
        rollout = jax.device_get(rollout)
        completions = completion_texts(tokenizer, rollout)
        t_reward = time.time()
        group_texts = [t for t in texts for _ in range(group)]
        group_examples = [e for e in examples for _ in range(group)]
        reward_out = roles.reward(group_texts, completions, group_examples)
        baseline_rewards = None
        if baseline is not None:
            greedy_out = roles.reward(texts, completion_texts(tokenizer, baseline), examples)
            baseline_rewards = np.repeat(greedy_out.total, group)
        references = None
        if self.algorithm.reference_template:
            references = self.references(texts, ids, examples, width=rollout.tokens.shape[1])
        seconds = {"rollout": t_reward - t0, "reward": time.time() - t_reward}
        return Generated(
            examples,
            rollout,
            completions,
            reward_out,
            baseline_rewards,
            work,
            seconds,
            versions_bt,
            references,
        )

    def references(self, texts, ids, examples, *, width: int) -> References:
        """Each prompt's gold answer rendered by the algorithm's `reference_template`, laid out
        like the rollout and scored by the reward role."""
        template = self.algorithm.reference_template
        responses = [template.format(answer=e.answer) for e in examples]
        tokens, mask = response_rows(
            self.parts.tokenizer,
            ids,
            responses,
            width=width,
            max_new_tokens=self.config.rollout.max_new_tokens,
        )
        rewards = self.roles.reward(texts, responses, examples).total
        return References(tokens, mask, np.asarray(rewards, np.float32))

    def experience(self, generated: Generated) -> Experience:
        """`generated` plus what the algorithm's train-side roles add (reference log-probs,
        critic values), computed with their current weights."""
        roles, rollout = self.roles, generated.rollout
        group = self.config.rollout.group_size
        step_rewards = step_columns = None
        if self.algorithm.step_rewards:  # dense process rewards: each step and its last token
            step_rewards, step_columns = dense_step_rewards(
                self.parts.tokenizer, rollout, generated.reward_out.steps
            )
        return Experience(
            rollout=rollout,
            rewards=generated.reward_out.total,
            group_size=group,
            ref_logp=None if roles.reference is None else roles.reference.logprobs(rollout.tokens),
            values=None if roles.critic is None else roles.critic.values(rollout.tokens),
            baseline_rewards=generated.baseline_rewards,
            references=generated.references,
            violations=_violations(generated.reward_out),
            sources=tuple(e.source for e in generated.examples for _ in range(group)),
            step_rewards=step_rewards,
            step_columns=step_columns,
        )

    def proximal_logprobs(self, tokens_bt) -> np.ndarray:
        """float32 [B, T] log-probs of `tokens_bt` under the actor's current weights."""
        actor = self.roles.actor
        if self._proximal is None:
            self._proximal = logprob_fn(actor.graphdef, temperature=self.config.rollout.temperature)
        tokens = place_batch(np.asarray(tokens_bt, np.int32), actor.mesh, actor.rules)
        with use_layout(layout(actor.mesh, actor.rules)):
            return np.asarray(self._proximal(actor.params, tokens))

    def process(self, experience: Experience):
        """The algorithm's train batch (packed when configured) and its host-side scalars.

        The batch carries the rollout's log-probs as `rollout_logp` (the behaviour policy), and
        `old_logp` becomes the actor's current log-probs when `config.off_policy` asks for the
        proximal policy (`jaxrl_llm.algorithms.off_policy`).
        """
        c = self.config
        batch, scalars = self.algorithm.make_batch(experience, self.algo_state)
        batch = self.stabilisers.prepare(batch)  # the adaptive entropy coefficient, if any
        if batch.rollout_logp is None:  # set by algorithms that pick rows (online DPO)
            rollout_logp = jnp.asarray(experience.rollout.logprobs, jnp.float32)
            batch = batch._replace(rollout_logp=rollout_logp)
        if self._off_policy.needs_proximal:
            proximal = self.proximal_logprobs(experience.rollout.tokens)
            batch = batch._replace(old_logp=jnp.asarray(proximal))
        if c.train.pack_sequences:
            batch, _ = pack_batch(
                batch,
                np.asarray(experience.rollout.sequence_lengths),
                row_multiple=c.train.num_minibatches * c.train.pack_row_multiple,
                width=max(c.train.pack_width, batch.tokens.shape[1]),
            )
        return batch, scalars

    def update(self, batch, step: int) -> dict[str, float]:
        """The actor's and the critic's updates over the minibatches of one step."""
        roles = self.roles
        train_actor = step >= self.algorithm.actor_frozen_steps
        actor_metrics, critic_metrics = [], []
        for minibatch in split_minibatches(batch, self.config.train.num_minibatches):
            if train_actor:
                actor_metrics.append(roles.actor.update(minibatch))
            if roles.critic is not None:
                critic_metrics.append(roles.critic.update(minibatch))
        out = {}
        if actor_metrics:
            out.update(_mean_metrics(actor_metrics, "train"))
        if critic_metrics:
            out.update(_mean_metrics(critic_metrics, "critic"))
        return out

    def step(self, step: int) -> StepRecord:
        """Sync the rollout's weights, generate, learn: one synchronous RL step."""
        start = time.time()
        sync = self.roles.rollout.sync(self.roles.actor.params)
        generated = self.generate(step, self.roles.rollout.params)
        self.roles.rollout.release()
        return self.learn(
            step,
            generated,
            data_after=self.parts.batcher.state(),
            start=start,
            scalars={"time/sync_s": sync.seconds},
        )

    def generated_scalars(self, generated: Generated) -> dict[str, float]:
        """More metrics of a step's samples, logged with the step's (none here; the episode
        runner adds its episodes' counts)."""
        del generated
        return {}

    def learn(
        self,
        step: int,
        generated: Generated,
        *,
        data_after: dict[str, Any],
        start: float,
        scalars: dict[str, float] | None = None,
    ) -> StepRecord:
        """Experience -> train batch -> updates for RL step `step`, and its record.

        Args:
          step: the RL step (the actor's version before these updates).
          generated: the step's samples (`generate`).
          data_after: the prompt batcher's state after this step's prompts (checkpointed).
          start: when the step started (time.time()), for "time/step_s".
          scalars: more metrics of the step (sync time, the asynchronous runner's).
        """
        t_prepare = time.time()
        experience = self.experience(generated)
        batch, algo_scalars = self.process(experience)
        new_shape = batch.tokens.shape not in self._train_shapes
        self._train_shapes.add(batch.tokens.shape)
        t_train = time.time()
        train_scalars = self.update(batch, step)
        train_scalars.update(self.stabilisers.observe(train_scalars))
        t_end = time.time()
        rows = experience.rewards.shape[0]
        self.algo_state = self.algorithm.update(
            self.algo_state, {**algo_scalars, **train_scalars, "batch_size": rows}
        )
        reward_out, rollout, group = generated.reward_out, experience.rollout, experience.group_size
        step_scalars = {
            "reward/mean": float(np.mean(reward_out.total)),
            "reward/accuracy": accuracy(reward_out.per_function["task"]),
            "reward/zero_std_groups": float(
                np.mean(reward_out.total.reshape(-1, group).std(axis=1) == 0)
            ),
            "reward/errors": float(sum(reward_out.num_errors.values())),
            "reward/timeouts": float(sum(reward_out.num_timeouts.values())),
            **{  # the learned rewards' and extra functions' means (the task's is the accuracy);
                # a judge's is its violation rate over the samples it gave a verdict on
                f"reward/{name}": _mean_of_verdicts(values)
                for name, values in reward_out.per_function.items()
                if name != "task"
            },
            "completion/length": float(np.mean(rollout.lengths)),
            # what a sync to a split rollout sends: every weight, or LoRA's adapters alone
            "sync/payload_bytes": float(self.roles.rollout.sync_payload_bytes),
            "completion/eos_fraction": float(np.mean(rollout.finish_reason != 0)),
            **_work_metrics(generated.work),
            "train/rows": float(batch.tokens.shape[0]),
            "time/new_train_shape": float(new_shape),
            **train_scalars,
            **{f"algo/{k}": v for k, v in algo_scalars.items()},
            "time/rollout_s": generated.seconds["rollout"],
            "time/reward_s": generated.seconds["reward"],
            "time/prepare_s": t_train - t_prepare,
            "time/train_s": t_end - t_train,
            "time/step_s": t_end - start,
            **self.generated_scalars(generated),
            **(generated.scalars or {}),
            **(scalars or {}),
        }
        examples, completions = generated.examples, generated.completions
        samples = [
            {
                "prompt": examples[i // group].question,
                "completion": completions[i],
                "reward": float(reward_out.total[i]),
                "answer": examples[i // group].answer,
            }
            for i in range(0, len(completions), group)
        ]
        skipped = step_scalars.get("train/nonfinite", 0.0) >= 1.0  # every actor update skipped
        if not skipped:
            self.meta.update(step=step + 1, data=data_after)
        last = step + 1 == self.config.train.num_steps
        return StepRecord(step + 1, step_scalars, samples, skip_save=skipped, last=last)


def _two_process_devices() -> list[jax.Device]:
    """This process's devices in a two-process asynchronous run; raises if it is not one."""
    if jax.process_count() != 2:
        raise ValueError(
            f"config.async_rl.processes=2 needs two processes of one jax.distributed run, this "
            f"run has {jax.process_count()}: start it with `python -m jaxrl_llm.distributed "
            "--num_processes 2 -- python -m jaxrl_llm.main ...`, or set "
            "config.async_rl.processes=1."
        )
    return jax.local_devices()


def _serve_generation(config, workdir: str, algorithm: Algorithm | None) -> dict[str, Any]:
    """Process 1 of a two-process asynchronous run: builds the run on its own devices and
    generates every batch for the learner (process 0)."""
    from jaxrl_llm.runners.online_async import AsyncRun

    algorithm = algorithms.check_algorithm(algorithm or algorithms.make(config))
    parts = build_parts(config)
    roles = build_roles(config, algorithm, parts, jax.local_devices())
    run = AsyncRun(config, workdir, algorithm, parts, roles)
    try:
        return run.serve_generation()
    finally:
        run.writer.close()


def train(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    progress: bool = True,
    algorithm: Algorithm | None = None,
    hooks: list[Hook] | None = None,
) -> dict[str, Any]:
    """Runs the configured algorithm, resuming from `workdir`'s latest checkpoint if any.

    Writes `metrics.jsonl`, `samples.jsonl`, TensorBoard events, `checkpoints/` and, at the end,
    `summary.json` (accuracy before and after, wall time) into `workdir`.

    Args:
      config: a run config (`jaxrl_llm.config.config_for(name)`), validated here.
      workdir: the run directory.
      progress: show a tqdm progress bar.
      algorithm: an `Algorithm` to run instead of `config.algorithm` (e.g. one with a custom
        loss, built in a notebook); the config still supplies everything else.
      hooks: replaces `default_hooks(...)`.

    Returns:
      The summary dict.

    Example:
      >>> summary = train(config_for("ppo"), "runs/ppo")
    """
    validate_config(config)
    start_time = time.time()
    devices = None
    if config.async_rl.enabled and config.async_rl.processes == 2:
        devices = _two_process_devices()
        if jax.process_index() == 1:  # the generator: no checkpoints, metrics or evaluation
            return _serve_generation(config, os.path.join(workdir, "generator"), algorithm)
    os.makedirs(workdir, exist_ok=True)
    check_resumable(config, workdir)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort(indent=2))
    algorithm = algorithms.check_algorithm(algorithm or algorithms.make(config))
    parts = build_parts(config)
    run_class = OnlineRun
    if config.async_rl.enabled:
        from jaxrl_llm.runners.online_async import AsyncRun

        run_class = AsyncRun
    elif config.env.name:
        from jaxrl_llm.runners.online_episodes import EpisodeRun

        run_class = EpisodeRun
    roles = build_roles(config, algorithm, parts, devices)
    run = run_class(config, workdir, algorithm, parts, roles)
    run.summary["host"] = host_info()
    run.summary["held_out"] = describe_held_out(run.eval_sets, config.task.held_out_fraction)
    if hooks is None:
        hooks = default_hooks(config, workdir, desc=algorithm.name.upper(), progress=progress)
    stop = StopSignal()
    try:
        for hook in hooks:
            hook.on_start(run)
        parts.batcher.restore(run.meta["data"])
        run.start_pipeline()
        train_start = time.time()
        for step in range(run.meta["step"], config.train.num_steps):
            record = run.step(step)
            budget = config.train.max_time_s
            out_of_time = bool(budget) and time.time() - train_start > budget
            # read once: a signal that lands while the hooks run (after the checkpoint hook
            # decided not to save) stops the run after the next step, which is then saved
            stopping = stop.requested
            record.last = record.last or out_of_time or bool(stopping)
            for hook in hooks:
                hook.on_step(run, record)
            if stopping:
                print(f"[jaxrl_llm] {stopping} received: step {step + 1} saved, stopping")
                run.summary["stopped_by"] = stopping
                break
            if out_of_time:
                print(
                    f"[jaxrl_llm] stopping after step {step + 1}: train.max_time_s={budget} spent"
                )
                break
        run.close_pipeline()
        run.summary["train_time_s"] = time.time() - train_start
        if not stop.requested:  # a preempted run leaves as fast as it can
            for hook in hooks:
                hook.on_end(run)
    except PipelineError as e:
        for hook in hooks:
            hook.on_error(run, e)
        raise
    except BaseException as e:
        run.fail(e)
        raise
    finally:
        run.close_pipeline()
        stop.restore()
        run.writer.close()
        for hook in hooks:
            if hasattr(hook, "close"):
                hook.close()
    run.summary["steps"] = run.meta["step"]
    run.summary["algorithm"] = algorithm.name
    run.summary["wall_time_s"] = time.time() - start_time
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(run.summary, f, indent=2)
    before, after = run.summary.get("eval_before"), run.summary.get("eval_after")
    if before and after:
        print(
            f"[jaxrl_llm] held-out greedy accuracy: before {100 * before['accuracy']:.1f}% -> "
            f"after {100 * after['accuracy']:.1f}% ({len(run.eval_sets[0].examples)} prompts, "
            f"{run.summary['wall_time_s'] / 60:.1f} min in this process)"
        )
    return run.summary
