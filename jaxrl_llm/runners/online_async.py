"""The asynchronous schedule: generator and learner at the same time, bounded staleness.

    config.async_rl.enabled = True          # train(config, workdir) then uses this schedule
    config.async_rl.max_staleness = 2       # k: batches trained at most 2 versions after their weights
    config.placement.mode = "split"         # generator and learner on disjoint devices
    config.async_rl.inflight_updates = True # PipelineRL: newer weights between decode chunks

See "LlamaRL: A Distributed Asynchronous Reinforcement Learning Framework for Efficient
Large-scale LLM Training" (2505.24034) and "AReaL: A Large-Scale Asynchronous Reinforcement
Learning System for Language Reasoning" (2505.24298). A generator thread has the run's collector
(single-turn samples or multi-turn episodes) make and score batch s with the newest published
weights allowed (`jaxrl_llm.algorithms.staleness`) and queues it tagged with that weight version;
the learner (the calling thread) trains batch s at version s,
then publishes its weights to the generator every `sync_every` updates: `RolloutWorker.snapshot`
reshards them device to device into the decode layout on the rollout mesh (under a transfer
guard, never through the host). Each thread drives its own jitted programs; with a split
placement they run on disjoint devices at once. The off-policy correction is `config.off_policy`.

Every sample carries the version that generated it and the learner checks the bound on every
one (`StalenessCounter`). Per step it logs the staleness, queue depth, each side's idle seconds
and the weight sync's seconds and bytes. A failing or stalled side stops the run within
`async_rl.timeout_s` with a `PipelineError` naming it, after a checkpoint of the last trained
step. In deterministic mode (the default) the schedule is fixed, so the run is a function of its
seed and a killed run resumes exactly: checkpoints also hold the older weight versions that
batches not yet trained will be generated with.

With in-flight updates (PipelineRL, 2509.19128; free-running mode only) the generator also asks
for the newest published weights between decode chunks of a batch (`jaxrl_llm.rollout.inflight`)
and tags every token with its version; the learner checks every token against the bound and
logs the tokens' staleness. A row's first token sets its sample version, the bound's reference.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import jax
import numpy as np

from jaxrl_llm.algorithms.staleness import (
    StalenessCounter,
    behaviour_version,
    checkpoint_slots,
    is_published,
    oldest_allowed,
    pending_versions,
)
from jaxrl_llm.runners.hooks import StepRecord
from jaxrl_llm.runners.online_sync import Schedule
from jaxrl_llm.runners.pipeline import GeneratedBatch, Pipeline, PipelineClosed
from jaxrl_llm.runners.remote_pipeline import RemotePipeline, weights_like

__all__ = ["AsyncSchedule", "pending_weights_target"]


def pending_weights_target(config, roles) -> list[Any]:
    """Arrays laid out like the older weight versions a deterministic asynchronous run's
    checkpoints hold (`checkpoint_slots` copies of the actor's weights in the decode layout): the
    restore target of that part of the tree; [] for other runs."""
    slots = checkpoint_slots(config.async_rl)
    if not slots:
        return []
    layout, _ = roles.rollout.snapshot(roles.actor.params)
    return [layout] * slots


class AsyncSchedule(Schedule):
    """A generator thread (or process) collecting beside the learner (see the module docstring).

    `train` drives it like the synchronous schedule (`step` is one learner step), between
    `start()` and `close()`.

    Args:
      config: the run config (`config.async_rl`).
    """

    def __init__(self, config):
        a = config.async_rl
        self.config = config
        self.max_staleness, self.sync_every = a.max_staleness, a.sync_every
        self.deterministic = a.deterministic
        self.inflight = a.inflight_updates
        self.processes = a.processes
        self.generator_error: BaseException | None = None
        self.pipeline: Pipeline | None = None
        self.counter = StalenessCounter(self.max_staleness)
        self._restored_slots: list[Any] | None = None
        self._generator: threading.Thread | None = None
        self.totals = {"learner_idle_s": 0.0, "generator_idle_s": 0.0, "sync_s": 0.0}
        self.totals.update(sync_bytes=0, syncs=0, tokens=0, token_staleness=0)

    # -- checkpoints: the train state plus the weight versions still to be generated with ----
    def state_tree(self, run, tree: dict[str, Any]) -> dict[str, Any]:
        """`tree` plus the older weight versions batches not yet trained will be generated
        with (deterministic mode)."""
        published = self.pipeline.published() if self.pipeline is not None else {}
        if not published:  # before the pipeline starts: a restore target
            target = pending_weights_target(self.config, run.roles)
            return {**tree, "pending_weights": target} if target else tree
        slots = checkpoint_slots(self.config.async_rl)
        if not slots:
            return tree
        versions = pending_versions(run.meta["step"], self.max_staleness, self.sync_every)
        run.meta["pending_versions"] = versions
        filler = max(published)
        tree["pending_weights"] = [
            published[versions[i] if i < len(versions) else filler] for i in range(slots)
        ]
        return tree

    def load_state_tree(self, tree: dict[str, Any]) -> dict[str, Any]:
        """Keeps the restored older weight versions for `start`; returns the rest."""
        self._restored_slots = tree.pop("pending_weights", None)
        return tree

    # -- the two sides ------------------------------------------------------------------------
    def publish(self, run, version: int) -> dict[str, float]:
        """Puts the actor's weights, as `version`, in the decode layout on the rollout mesh."""
        params, stats = run.roles.rollout.snapshot(run.roles.actor.params)
        self.pipeline.publish(version, params)
        keep_from = (
            behaviour_version(version, self.max_staleness, self.sync_every)
            if self.deterministic
            else version
        )
        self.pipeline.drop_weights_below(keep_from)
        self.totals["sync_s"] += stats.seconds
        self.totals["sync_bytes"] += stats.bytes
        self.totals["syncs"] += 1
        return {"time/sync_s": stats.seconds, "async/sync_bytes": float(stats.bytes)}

    def _generate_batches(self, run, first_step: int) -> None:
        """The generator thread: batches first_step .. num_steps - 1, in order."""
        k, n = self.max_staleness, self.sync_every
        try:
            for step in range(first_step, self.config.train.num_steps):
                at_least = (
                    behaviour_version(step, k, n) if self.deterministic else oldest_allowed(step, k)
                )
                pulled_before = self.pipeline.pull_seconds
                version, params, waited = self.pipeline.weights(
                    at_least=at_least, exact=self.deterministic
                )
                newest = self.pipeline.newest if self.inflight else None
                generated = run.generate(step, params, weights=newest)
                del params
                versions_b = np.full(generated.rollout.tokens.shape[0], version, np.int32)
                if generated.versions_bt is not None:  # the version each row started with
                    mask = np.asarray(generated.rollout.completion_mask)
                    versions_b = np.where(mask, generated.versions_bt, step).min(axis=1)
                    version = int(versions_b.min())
                data_after = run.parts.batcher.state()
                pull_s = self.pipeline.pull_seconds - pulled_before
                self.pipeline.put(
                    GeneratedBatch(step, version, versions_b, generated, data_after, waited, pull_s)
                )
        except PipelineClosed:
            return
        except BaseException as e:  # the learner re-raises it as a PipelineError
            self.generator_error = e
            self.pipeline.fail("generator", e)

    def start(self, run) -> None:
        """Publishes the starting weights (and restored older versions) and starts the
        generator thread at the run's current step (with two processes: tells the generator
        process where the run starts)."""
        a = self.config.async_rl
        if self.processes == 2:
            self.pipeline = RemotePipeline(
                side="learner", timeout_s=a.timeout_s, host=a.transfer_host
            )
        else:
            self.pipeline = Pipeline(timeout_s=a.timeout_s)
        start = run.meta["step"]
        counts = run.meta.get("staleness_counts", {})
        self.counter = StalenessCounter(self.max_staleness, {int(s): c for s, c in counts.items()})
        if self._restored_slots is not None:
            for version, params in zip(
                run.meta.get("pending_versions", []), self._restored_slots, strict=False
            ):
                self.pipeline.publish(version, params)
            self._restored_slots = None
        if is_published(start, self.sync_every) or not self.deterministic:
            self.publish(run, start)
        if self.processes == 2:
            self.pipeline.send_start(start, run.meta["data"])
            return
        self._generator = threading.Thread(
            target=self._generate_batches,
            args=(run, start),
            name="jaxrl_llm-generator",
            daemon=True,
        )
        self._generator.start()

    def serve_generation(self, run) -> dict[str, Any]:
        """The generator process of a two-process run: waits for the learner's start, then
        generates and sends every batch of the run; returns its summary. Raises what stopped
        it (its own error, or a `PipelineError` naming the learner)."""
        a = self.config.async_rl
        rollout = run.roles.rollout  # what the learner publishes: decode layout and dtype
        decode = jax.eval_shape(rollout.in_decode_dtype, run.roles.actor.params)
        like = weights_like(decode, rollout.shardings)
        self.pipeline = RemotePipeline(
            side="generator", timeout_s=a.timeout_s, weights_like=like, host=a.transfer_host
        )
        try:
            step, data = self.pipeline.receive_start()
            run.parts.batcher.restore(data)
            self._generate_batches(run, step)
        finally:
            self.pipeline.close()
        if self.generator_error is not None:
            raise self.generator_error
        return {
            "role": "generator",
            "first_step": step,
            "pull_s": self.pipeline.pull_seconds,
        }

    def close(self, run, *, join_timeout_s: float = 10.0) -> None:
        """Stops the generator (it exits at its next wait) and waits for it a little; a
        generator still busy after that ends in the background (a daemon thread). Puts
        `async_summary()` into the run's summary."""
        if self.pipeline is not None:
            self.pipeline.close()
            run.summary["async"] = self.async_summary()
        if self._generator is not None:
            self._generator.join(join_timeout_s)
            self._generator = None

    def fail(self, run, error: BaseException) -> None:
        """Tells the generator that the learner failed (it stops waiting for weights)."""
        if self.pipeline is not None:
            self.pipeline.fail("learner", error)

    def step(self, run, step: int) -> StepRecord:
        """One learner step: the next queued batch, trained at version `step`, then publish."""
        start = time.time()
        batch, learner_idle, depth = self.pipeline.get()
        if batch.step != step:
            raise RuntimeError(
                f"the learner expected batch {step}, the generator sent {batch.step}"
            )
        staleness_b = self.counter.record(step, batch.versions_b)
        self.totals["learner_idle_s"] += learner_idle
        self.totals["generator_idle_s"] += batch.generator_idle_s
        scalars = {
            "async/version": float(batch.version),
            "async/staleness": float(staleness_b.mean()),
            "async/queue_depth": float(depth),
            "time/learner_idle_s": learner_idle,
            "time/generator_idle_s": batch.generator_idle_s,
        }
        if self.processes == 2:
            scalars["time/pull_s"] = batch.pull_s
        if batch.generated.versions_bt is not None:
            scalars.update(self.token_staleness(step, batch.generated))
        record = run.learn(
            step, batch.generated, data_after=batch.data_after, start=start, scalars=scalars
        )
        version = step + 1
        if is_published(version, self.sync_every):  # also after the last step: the same
            # metrics whatever num_steps is, and a checkpoint holds what a longer run needs
            record.scalars.update(self.publish(run, version))
        run.meta["staleness_counts"] = {str(s): c for s, c in self.counter.histogram().items()}
        return record

    def token_staleness(self, step: int, generated) -> dict[str, float]:
        """Checks every completion token's weight version of an in-flight batch against the
        bound; its mean staleness, the fraction of tokens sampled by a newer version than
        their row started with, and how many versions sampled the batch."""
        mask = np.asarray(generated.rollout.completion_mask)
        versions_bt = np.asarray(generated.versions_bt)
        staleness_t = self.counter.check(step, versions_bt[mask])
        start_b = np.where(mask, versions_bt, step).min(axis=1)
        updated = (versions_bt > start_b[:, None]) & mask
        self.totals["tokens"] += int(mask.sum())
        self.totals["token_staleness"] += int(staleness_t.sum())
        return {
            "async/token_staleness": float(staleness_t.mean()),
            "async/updated_token_fraction": float(updated.sum() / mask.sum()),
            "async/versions_in_batch": float(len(np.unique(versions_bt[mask]))),
        }

    def async_summary(self) -> dict[str, Any]:
        """Staleness histogram, idle seconds of each side and weight-sync totals of the run."""
        syncs = max(self.totals["syncs"], 1)
        return {
            "max_staleness": self.max_staleness,
            "sync_every": self.sync_every,
            "deterministic": self.deterministic,
            "staleness_histogram": self.counter.histogram(),
            "learner_idle_s": self.totals["learner_idle_s"],
            "generator_idle_s": self.totals["generator_idle_s"],
            "mean_sync_s": self.totals["sync_s"] / syncs,
            "mean_sync_bytes": self.totals["sync_bytes"] / syncs,
            "inflight_updates": self.inflight,
            "mean_token_staleness": (
                self.totals["token_staleness"] / self.totals["tokens"]
                if self.totals["tokens"]
                else None
            ),
        }
