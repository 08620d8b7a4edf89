"""Schedules: what drives an online run's steps, and the synchronous one.

An online run is a collector and a schedule put together (`jaxrl_llm.runners.online`). The
schedule decides when the collector collects and with which weights, then hands each step's
samples to the run's learner side (`OnlineRun.learn`: experience -> process -> update).

    SyncSchedule()           sync the rollout's weights, collect, learn: one step after another
    AsyncSchedule(config)    a generator beside the learner, bounded staleness
                             (`jaxrl_llm.runners.online_async`; also as two processes)

A schedule may also run something beside the loop (`start` / `close` / `fail`) and add to what
checkpoints hold (`state_tree` / `load_state_tree`); `Schedule`'s defaults do neither.
"""

from __future__ import annotations

import time
from typing import Any

from jaxrl_llm.runners.hooks import StepRecord

__all__ = ["Schedule", "SyncSchedule"]


class Schedule:
    """The interface of a schedule, with the defaults of one that runs nothing beside the loop.

    Every method takes the run it drives (an `OnlineRun`).
    """

    def start(self, run) -> None:
        """Called once the run is restored (and its collector started), before the first step."""

    def step(self, run, step: int) -> StepRecord:
        """RL step `step`: its samples collected and learned from; its record."""
        raise NotImplementedError

    def close(self, run) -> None:
        """Called when the loop ends, normally or not (perhaps more than once)."""

    def fail(self, run, error: BaseException) -> None:
        """Called when the loop raises `error`."""

    def state_tree(self, run, tree: dict[str, Any]) -> dict[str, Any]:
        """The run's checkpointed pytree `tree`, with what this schedule adds."""
        del run
        return tree

    def load_state_tree(self, tree: dict[str, Any]) -> dict[str, Any]:
        """Takes this schedule's part out of a restored `state_tree`; returns the rest."""
        return tree


class SyncSchedule(Schedule):
    """One step after another on the run's devices: sync the rollout's weights to the actor's
    (reshard to the decode layout), collect, release the rollout's copy, learn."""

    def step(self, run, step: int) -> StepRecord:
        """Sync the rollout's weights, generate, learn: one synchronous RL step."""
        start = time.time()
        sync = run.roles.rollout.sync(run.roles.actor.params)
        generated = run.generate(step, run.roles.rollout.params)
        run.roles.rollout.release()
        return run.learn(
            step,
            generated,
            data_after=run.parts.batcher.state(),
            start=start,
            scalars={"time/sync_s": sync.seconds},
        )
