"""What the generator and learner threads share: published weight versions and a queue of
generated batches, each tagged with the version that produced it.

Every wait has a timeout and ends early when the other side fails, so a generator that raises
or stalls stops the learner with a `PipelineError` naming it (and the other way round) instead
of a hang.

    pipeline = Pipeline(timeout_s=600)
    pipeline.publish(0, params)                        # learner
    version, params = pipeline.weights(at_least=0)     # generator
    pipeline.put(GeneratedBatch(step=0, version=version, ...))
    batch = pipeline.get()                             # learner
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple


class PipelineError(RuntimeError):
    """The generator or the learner failed or stalled; the run stops."""


class PipelineClosed(Exception):
    """The run ended (normally or by a stop request); the waiting side exits quietly."""


class GeneratedBatch(NamedTuple):
    """One RL step's samples as the generator hands them to the learner.

    Attributes:
      step: the learner step that trains it.
      version: the weight version that generated it.
      versions_b: int32 [B], the weight version each sample started with (`version`; with
        in-flight updates its later tokens may come from newer versions:
        `generated.versions_bt`).
      generated: what `OnlineRun.generate` returned (rollout, rewards, prompts, timings).
      data_after: the prompt batcher's state after drawing this batch's prompts.
      generator_idle_s: seconds the generator waited for weights before this batch.
      pull_s: of which (two processes) seconds pulling weights from the learner's devices,
        while decoding (in-flight updates) included; 0 in one process.
    """

    step: int
    version: int
    versions_b: Any
    generated: Any
    data_after: dict[str, Any]
    generator_idle_s: float
    pull_s: float = 0.0


class Pipeline:
    """Published weights (version -> params in the decode layout) and a FIFO of batches.

    Args:
      timeout_s: the longest either side waits for the other.
    """

    def __init__(self, *, timeout_s: float):
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._weights: dict[int, Any] = {}
        self._batches: collections.deque[GeneratedBatch] = collections.deque()
        self._error: BaseException | None = None
        self._failed_side: str | None = None
        self._closed = False
        self.pull_seconds = 0.0  # weights never leave the process (see `RemotePipeline`)

    # -- waiting --------------------------------------------------------------------------------
    def _wait(self, ready: Callable[[], bool], what: str, waiter: str, other: str) -> float:
        """Waits (holding the lock on return) until `ready()`; returns the seconds waited."""
        start = time.monotonic()
        deadline = start + self.timeout_s
        while not ready():
            self._raise_if_ended(waiter)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PipelineError(
                    f"the {waiter} waited {self.timeout_s:.0f}s for {what} from the {other}; "
                    f"the {other} is stalled or too slow. Raise config.async_rl.timeout_s if it "
                    "is only slow."
                )
            self._cond.wait(remaining)
        return time.monotonic() - start

    def _raise_if_ended(self, side: str) -> None:
        """Raises `PipelineError` if the other side failed, `PipelineClosed` if the run ended."""
        if self._error is not None:
            raise PipelineError(
                f"the {self._failed_side} failed ({type(self._error).__name__}: "
                f"{self._error}); the {side} stops too"
            ) from self._error
        if self._closed:
            raise PipelineClosed()

    # -- weights --------------------------------------------------------------------------------
    def publish(self, version: int, params: Any) -> None:
        """Makes `params` (weight version `version`) available to the generator."""
        with self._cond:
            self._weights[version] = params
            self._cond.notify_all()

    def weights(self, *, at_least: int, exact: bool = False) -> tuple[int, Any, float]:
        """The newest published version >= `at_least` (exactly `at_least` when `exact`), its
        params, and the seconds waited for it."""

        def pick() -> int | None:
            if exact:
                return at_least if at_least in self._weights else None
            fresh = [v for v in self._weights if v >= at_least]
            return max(fresh) if fresh else None

        with self._cond:
            waited = self._wait(
                lambda: pick() is not None, f"weight version {at_least}", "generator", "learner"
            )
            version = pick()
            return version, self._weights[version], waited

    def newest(self) -> tuple[int, Any]:
        """The newest published version and its params, without waiting (an in-flight
        generator's check between decode chunks); raises if the run ended or failed."""
        with self._cond:
            self._raise_if_ended("generator")
            if not self._weights:
                raise PipelineError("no weight version is published; the learner publishes first")
            version = max(self._weights)
            return version, self._weights[version]

    def drop_weights_below(self, version: int) -> None:
        """Forgets published versions older than `version` (the generator holds what it uses)."""
        with self._cond:
            for v in [v for v in self._weights if v < version]:
                del self._weights[v]

    def published(self) -> dict[int, Any]:
        """A copy of {version: params} currently published."""
        with self._cond:
            return dict(self._weights)

    # -- batches --------------------------------------------------------------------------------
    def put(self, batch: GeneratedBatch) -> None:
        """Queues a generated batch for the learner."""
        with self._cond:
            if self._closed:
                raise PipelineClosed()
            self._batches.append(batch)
            self._cond.notify_all()

    def get(self) -> tuple[GeneratedBatch, float, int]:
        """The oldest queued batch, the seconds the learner waited for it, and the queue depth
        when it arrived (batches waiting, this one included)."""
        with self._cond:
            waited = self._wait(lambda: bool(self._batches), "a batch", "learner", "generator")
            depth = len(self._batches)
            return self._batches.popleft(), waited, depth

    # -- ending ---------------------------------------------------------------------------------
    def fail(self, side: str, error: BaseException) -> None:
        """Records that `side` ("generator" or "learner") failed; wakes every waiter."""
        with self._cond:
            if self._error is None:
                self._error, self._failed_side = error, side
            self._cond.notify_all()

    def close(self) -> None:
        """Ends the run: waiters raise `PipelineClosed`; queued batches and weights are dropped."""
        with self._cond:
            self._closed = True
            self._batches.clear()
            self._weights.clear()
            self._cond.notify_all()
