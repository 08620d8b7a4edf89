"""One online run: a collector's samples -> experience -> train batch -> updates, for any algorithm.

`OnlineRun` is the learner side every schedule shares. `generate` has the run's collector
(`jaxrl_llm.runners.collectors`) make a step's `Generated`, in as many rounds as the stabilisers
ask (dynamic sampling). Given that, `learn` adds what the algorithm's train-side roles provide
(reference log-probs, critic values), lets the algorithm build the train batch (`make_batch`),
runs the actor's (and critic's) jitted updates over minibatches and the algorithm's `update`, and
reports the step's metrics. It is also the `RunContext` the hooks see (`jaxrl_llm.runners.hooks`):
its checkpointed state is the roles', the algorithm's and what its schedule adds. Nothing here
knows a particular algorithm, collector or schedule.

Each minibatch update may accumulate micro-batches (`config.train.grad_accumulation`), and is
followed by the moving-average step of a reference that follows the policy
(`config.reference.ema_decay`). Before the first RL step, `pretrain_critic` trains the critic
alone on the initial policy's rollouts when the algorithm asks for it (value pretraining).
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_llm.algorithms.base import Algorithm, Experience
from jaxrl_llm.algorithms.batch import micro_batch_weights, pack_batch, split_minibatches
from jaxrl_llm.algorithms.off_policy import OffPolicyConfig
from jaxrl_llm.metrics import MetricsWriter
from jaxrl_llm.models.partitioning import use_layout
from jaxrl_llm.rewards import accuracy
from jaxrl_llm.rewards.model_check import model_verifier_scalars
from jaxrl_llm.rewards.process import dense_step_rewards
from jaxrl_llm.roles import place_batch
from jaxrl_llm.roles.reference import logprob_fn
from jaxrl_llm.rollout.inflight import WeightsSource
from jaxrl_llm.runners.collectors import Collector, Generated
from jaxrl_llm.runners.components import Roles, RunParts
from jaxrl_llm.runners.hooks import StepRecord
from jaxrl_llm.runners.online_sync import Schedule
from jaxrl_llm.runners.stabilisers import StepStabilisers
from jaxrl_llm.sharding import layout

__all__ = ["OnlineRun", "state_tree"]


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
    """The mean of each metric over the minibatches' metric dicts, as "<prefix>/<name>"."""
    rows = jax.device_get(rows)
    return {f"{prefix}/{k}": float(np.mean([float(r[k]) for r in rows])) for k in rows[0]}


def _moving_reference(roles: Roles) -> bool:
    """Whether the run's reference follows the policy (`config.reference.ema_decay > 0`)."""
    return roles.reference is not None and roles.reference.ema_decay > 0


def state_tree(roles: Roles, algo_state: Any) -> dict[str, Any]:
    """The pytree a checkpoint holds: actor (and critic) train states, the algorithm's state,
    and the reference's weights when they follow the policy (a moving average)."""
    tree = {"actor": roles.actor.state, "algorithm": algo_state}
    if roles.critic is not None:
        tree["critic"] = roles.critic.state
    if _moving_reference(roles):
        tree["reference"] = roles.reference.params
    return tree


class OnlineRun:
    """One online run's state and the hook-facing `RunContext` (see the module docstring).

    Attributes:
      config, workdir, algorithm, parts, roles: what the run is made of.
      collector: what makes each step's samples (`SingleTurnSampler`, `EpisodePlayer`).
      schedule: what drives the steps (`SyncSchedule`, `AsyncSchedule`).
      algo_state: the algorithm's state (`Algorithm.init`), checkpointed with the roles' states.
      meta: JSON metadata checkpointed beside the state: step, data position, eval_before.
      summary: what `train` returns and writes to summary.json.
    """

    def __init__(
        self,
        config,
        workdir: str,
        algorithm: Algorithm,
        parts: RunParts,
        roles: Roles,
        *,
        collector: Collector,
        schedule: Schedule,
    ):
        self.config, self.workdir, self.algorithm = config, workdir, algorithm
        self.parts, self.roles = parts, roles
        self.collector, self.schedule = collector, schedule
        self.algo_state = algorithm.init()
        self.meta: dict[str, Any] = {"step": 0, "data": parts.batcher.state(), "eval_before": None}
        self.summary: dict[str, Any] = {}
        self.writer = MetricsWriter.for_run(config, workdir)
        pad_id = parts.tokenizer.pad_token_id or 0
        self.stabilisers = StepStabilisers(
            config, pad_id=pad_id, meta=self.meta, vocab_size=parts.tokenizer.vocab_size
        )
        self._train_shapes: set[tuple[int, ...]] = set()
        self._off_policy = OffPolicyConfig.from_config(config)
        self._proximal = None  # the actor's jitted log-prob forward, built on first use

    # -- RunContext ---------------------------------------------------------------------------
    @property
    def eval_sets(self) -> list:
        """The collector's held-out sets, the run's task first."""
        return self.collector.eval_sets

    @property
    def eval_correct(self) -> dict[str, Any]:
        """Per-question correctness of the last evaluation (for the metrics writer)."""
        return self.collector.eval_correct

    @property
    def eval_details(self) -> dict[str, Any]:
        """Per-question answers of the last evaluation (`Evaluator.details`), where kept."""
        return getattr(self.collector, "eval_details", {})

    def state_tree(self) -> dict[str, Any]:
        """Everything that changes during training, as one pytree (what checkpoints hold):
        the roles' and the algorithm's state, and what the schedule adds."""
        return self.schedule.state_tree(self, state_tree(self.roles, self.algo_state))

    def load_state_tree(self, tree: dict[str, Any]) -> None:
        """Puts a restored `state_tree()` back into the roles and the schedule (`train`
        restores the data position from `meta`)."""
        tree = self.schedule.load_state_tree(tree)
        self.roles.actor.state = tree["actor"]
        self.algo_state = tree["algorithm"]
        if self.roles.critic is not None:
            self.roles.critic.state = tree["critic"]
        if _moving_reference(self.roles):
            self.roles.reference.params = tree["reference"]

    def evaluate(self) -> dict[str, float]:
        """The collector's held-out metrics of the current actor."""
        return self.collector.evaluate()

    # -- collect -> process -> update -------------------------------------------------------
    def generate(self, step: int, params, *, weights: WeightsSource | None = None) -> Generated:
        """Everything the rollout side does for RL step `step`, on the host: one or more
        rounds of the collector's `generate` (dynamic sampling), shaped by the run's
        stabilisers (`jaxrl_llm.runners.stabilisers`)."""
        generated, scalars = self.stabilisers.collect(
            lambda r: self.collector.generate(step, params, weights=weights, round_index=r)
        )
        return generated._replace(scalars=scalars)

    def experience(self, generated: Generated) -> Experience:
        """`generated` plus what the algorithm's train-side roles add (reference log-probs,
        critic values), computed with their current weights, and the collector's fields
        (registered ones under `collected`)."""
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
            collected=dict(generated.collected or {}),
            **self.collector.experience_fields(generated),
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
        batch, scalars = self.algorithm.make_batch(experience, self.algo_state)
        batch = self.stabilisers.prepare(batch)  # the adaptive entropy coefficient, if any
        if batch.rollout_logp is None:  # set by algorithms that pick rows (online DPO)
            rollout_logp = jnp.asarray(experience.rollout.logprobs, jnp.float32)
            batch = batch._replace(rollout_logp=rollout_logp)
        if self._off_policy.needs_proximal:
            proximal = self.proximal_logprobs(experience.rollout.tokens)
            batch = batch._replace(old_logp=jnp.asarray(proximal))
        return self.packed(batch, experience), scalars

    def packed(self, batch, experience: Experience):
        """`batch` packed (`config.train.pack_sequences`) into a row count that divides into
        minibatches and their micro-batches; else `batch`."""
        c = self.config
        if not c.train.pack_sequences:
            return batch
        micro = c.train.num_minibatches * c.train.get("grad_accumulation", 1)
        batch, _ = pack_batch(
            batch,
            np.asarray(experience.rollout.sequence_lengths),
            row_multiple=micro * c.train.pack_row_multiple,
            width=max(c.train.pack_width, batch.tokens.shape[1]),
        )
        return batch

    def update(self, batch, step: int, *, train_actor: bool | None = None) -> dict[str, float]:
        """The actor's and the critic's updates over the minibatches of one step (the actor's
        only from step `algorithm.actor_frozen_steps` on, or as `train_actor` says), each
        accumulating `config.train.grad_accumulation` micro-batches, and after each actor
        update the moving-average step of a reference that follows the policy."""
        roles, c = self.roles, self.config
        if train_actor is None:
            train_actor = step >= self.algorithm.actor_frozen_steps
        num_micro = c.train.get("grad_accumulation", 1)
        actor_metrics, critic_metrics = [], []
        for minibatch in split_minibatches(batch, c.train.num_minibatches):
            weights = None
            if num_micro > 1:  # each micro-batch's share of the loss's denominator
                weights = micro_batch_weights(minibatch, num_micro, agg=c.loss.agg)
            if train_actor:
                actor_metrics.append(roles.actor.update(minibatch, micro_weights=weights))
                if _moving_reference(roles):
                    roles.reference.ema_update(roles.actor.params)
            if roles.critic is not None:
                critic_metrics.append(roles.critic.update(minibatch, micro_weights=weights))
        out = {}
        if actor_metrics:
            out.update(_mean_metrics(actor_metrics, "train"))
        if critic_metrics:
            out.update(_mean_metrics(critic_metrics, "critic"))
        return out

    def pretrain_critic(self) -> None:
        """Value pretraining: before the first RL step, the critic alone trains on
        `algorithm.critic_pretrain_steps` batches of the initial policy's rollouts.

        See "What's Behind PPO's Collapse in Long-CoT? Value Optimization Holds the Secret"
        (VC-PPO, 2503.01491), section 4.1: a critic initialised from the policy (or a reward
        model) is biased at the start, and GAE with lambda < 1 carries that bias into the
        advantages; fitting it first to Monte Carlo returns (`critic_pretrain_batch`, lambda
        1 for PPO) of the policy it will judge removes it. The actor, the reference and the
        algorithm's state stay as they are. The prompts are those of the first RL steps (the
        prompt batcher is put back afterwards, so the RL steps see the prompts they would
        without it), sampled with seeds no RL step uses (as step -1, -2, ...); overlong shaping
        applies as in RL, dynamic sampling does not. Nothing happens on a resumed run (step >
        0). Its losses and explained variances go to summary.json ("critic_pretrain").
        """
        steps = self.algorithm.critic_pretrain_steps
        if not steps or self.meta["step"] > 0:
            return
        t0 = time.time()
        batcher, rollout = self.parts.batcher, self.roles.rollout
        data = batcher.state()
        rollout.sync(self.roles.actor.params)
        rows = []
        for i in range(steps):
            generated = self.collector.generate(-(i + 1), rollout.params)
            generated, _ = self.stabilisers.shape_overlong(generated, {})
            experience = self.experience(generated)
            batch, _ = self.algorithm.critic_pretrain_batch(experience, self.algo_state)
            rows.append(self.update(self.packed(batch, experience), -(i + 1), train_actor=False))
        rollout.release()
        batcher.restore(data)
        record = {
            "steps": steps,
            "loss": [r["critic/loss"] for r in rows],
            "explained_variance": [r["critic/explained_variance"] for r in rows],
            "seconds": time.time() - t0,
        }
        self.summary["critic_pretrain"] = record
        print(
            f"[jaxrl_llm] value pretraining: {steps} batches of the initial policy's rollouts, "
            f"critic loss {record['loss'][0]:.4f} -> {record['loss'][-1]:.4f}, explained "
            f"variance {record['explained_variance'][0]:.3f} -> "
            f"{record['explained_variance'][-1]:.3f}"
        )

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
          scalars: more metrics of the step (the schedule's: sync time, staleness ...).
        """
        t_prepare = time.time()
        experience = self.experience(generated)
        batch, algo_scalars = self.process(experience)
        new_shape = batch.tokens.shape not in self._train_shapes
        self._train_shapes.add(batch.tokens.shape)
        t_train = time.time()
        trained_tokens = bool(np.asarray(experience.rollout.completion_mask).any())
        if trained_tokens:
            train_scalars = self.update(batch, step)
        else:
            # Every row's loss is masked (dynamic sampling kept no group, or the overlong
            # filter took every completion): no update, as an empty batch has no gradient and
            # an optimizer step would still move the weights (Adam's momentum, weight decay);
            # the per-token metrics (loss, entropy, ...) would read 0 without measuring
            # anything, so none is logged.
            train_scalars = {"train/no_loss_tokens": 1.0}
        train_scalars.update(self.stabilisers.observe(train_scalars, trained_tokens=trained_tokens))
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
            # does the learned reward still rank the verifier's right samples first?
            **model_verifier_scalars(reward_out.per_function),
            **{  # user rewards' samples with no valid value (`jaxrl_llm.rewards.user`)
                f"reward/{name}/skipped": float(count)
                for name, count in (getattr(reward_out, "num_skipped", None) or {}).items()
            },
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
            **self.collector.generated_scalars(generated),
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
