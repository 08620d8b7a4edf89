"""Bounded staleness: which weight version may generate which batch, and the `async_rl` config.

The learner trains batch s at version s (it has applied s updates). A batch generated with
weights of version v is `s - v` versions stale; `max_staleness` = k bounds that (LlamaRL,
AReaL): the generator may start batch s only once version s - k is published, so it runs at most
k + 1 batches ahead of the learner, and k = 0 is the synchronous schedule. The learner publishes
a version every `sync_every` = N updates (LlamaRL's broadcast interval); N <= k + 1 keeps a
published version inside every batch's window [s - k, s].

Deterministic mode fixes the schedule: batch s is generated with exactly
`behaviour_version(s, k, N)`, the oldest published version the bound allows (a generator that
is never the bottleneck), so a run is a function of its seed whatever the threads' timing.
"""

from __future__ import annotations

import math

import ml_collections
import numpy as np


def async_section() -> ml_collections.ConfigDict:
    """The `config.async_rl` fields."""
    c = ml_collections.ConfigDict()
    # Use the asynchronous schedule (jaxrl_llm.runners.online_async) instead of the synchronous one.
    c.enabled = False
    # k: a batch is trained at most k learner versions after the weights that generated it
    # (0 = synchronous, the synchronous runner's numbers).
    c.max_staleness = 1
    # N: the learner publishes its weights to the generator every N updates (N <= k + 1).
    c.sync_every = 1
    # Fixed generate/train schedule (batch s generated with version behaviour_version(s)):
    # reproducible from the seed, and resumed exactly (checkpoints also hold the older weight
    # versions still to be used). False: the generator takes the newest published version.
    c.deterministic = True
    # Seconds either side may wait for the other (a batch, a weight version) before the run
    # stops with an error naming the side that stalled.
    c.timeout_s = 1800.0
    # PipelineRL: the generator takes the newest published weights between decode chunks of a
    # batch (keeping its KV cache), so each token carries its own version (free-running only).
    c.inflight_updates = False
    # Decode steps between two weight checks of an in-flight generator.
    c.inflight_chunk_tokens = 16
    # 1: generator and learner are threads of one process. 2: two processes of one
    # jax.distributed run (learner = process 0, generator = process 1, each on its own devices);
    # start both, e.g. `python -m jaxrl_llm.distributed --num_processes 2 -- python -m
    # jaxrl_llm.main ...` (jaxrl_llm.runners.remote_pipeline).
    c.processes = 1
    # With 2 processes: the address the generator reaches the learner's weight server at (the
    # learner machine's IP when the processes run on different hosts).
    c.transfer_host = "127.0.0.1"
    return c


def validate_async_section(config) -> None:
    """Raises ValueError naming the first bad `config.async_rl` field and the fix."""
    a = config.async_rl
    if not isinstance(a.max_staleness, int) or a.max_staleness < 0:
        raise ValueError(
            f"config.async_rl.max_staleness={a.max_staleness!r} must be an integer >= 0."
        )
    if not isinstance(a.sync_every, int) or not 1 <= a.sync_every <= a.max_staleness + 1:
        raise ValueError(
            f"config.async_rl.sync_every={a.sync_every!r} must be an integer in [1, "
            f"max_staleness + 1 = {a.max_staleness + 1}]: with fewer broadcasts no published "
            "version would be fresh enough for some batch. Raise max_staleness or lower it."
        )
    if not a.timeout_s > 0:
        raise ValueError(f"config.async_rl.timeout_s={a.timeout_s} must be > 0 seconds.")
    if a.inflight_updates and a.deterministic:
        raise ValueError(
            "config.async_rl.inflight_updates=True switches weights whenever the learner "
            "publishes, which no fixed schedule can reproduce: set "
            "config.async_rl.deterministic=False with it."
        )
    if a.processes not in (1, 2):
        raise ValueError(
            f"config.async_rl.processes={a.processes!r} must be 1 (threads of one process) or 2 "
            "(learner and generator processes)."
        )
    if not isinstance(a.inflight_chunk_tokens, int) or a.inflight_chunk_tokens < 1:
        raise ValueError(
            f"config.async_rl.inflight_chunk_tokens={a.inflight_chunk_tokens!r} must be an "
            "integer >= 1 (decode steps between weight checks)."
        )


def is_published(version: int, sync_every: int) -> bool:
    """Whether the learner publishes `version` (version 0, the initial weights, always)."""
    return version % sync_every == 0


def oldest_allowed(step: int, max_staleness: int) -> int:
    """The oldest weight version that may generate batch `step`."""
    return max(0, step - max_staleness)


def behaviour_version(step: int, max_staleness: int, sync_every: int = 1) -> int:
    """The version deterministic mode generates batch `step` with: the oldest published one
    the bound allows (`step` itself when max_staleness = 0)."""
    return math.ceil(oldest_allowed(step, max_staleness) / sync_every) * sync_every


def pending_versions(learner_version: int, max_staleness: int, sync_every: int) -> list[int]:
    """Published versions older than `learner_version` that batches not yet trained still use
    in deterministic mode (what a checkpoint must keep to resume exactly)."""
    first = behaviour_version(learner_version, max_staleness, sync_every)
    return list(range(first, learner_version, sync_every))


def pending_slots(max_staleness: int, sync_every: int) -> int:
    """The most `pending_versions` there can be: a checkpoint's fixed number of weight slots."""
    return math.ceil(max_staleness / sync_every)


def checkpoint_slots(async_rl) -> int:
    """The older weight versions each checkpoint of a run holds: `pending_slots` for a
    deterministic asynchronous run, else 0. `async_rl` is `config.async_rl` or the same section
    read back from a run's config.json (a dict)."""
    if not (async_rl.get("enabled") and async_rl.get("deterministic")):
        return 0
    return pending_slots(async_rl["max_staleness"], async_rl["sync_every"])


class StalenessCounter:
    """Counts trained samples by staleness and checks each against the bound.

    Example:
      >>> counter = StalenessCounter(max_staleness=2)
      >>> counter.record(step=5, versions_b=np.array([3, 3, 4]))   # staleness 2, 2, 1
      >>> counter.histogram()
      {1: 1, 2: 2}
    """

    def __init__(self, max_staleness: int, counts: dict[int, int] | None = None):
        self.max_staleness = max_staleness
        self.counts: dict[int, int] = dict(counts or {})

    def check(self, step: int, versions: np.ndarray) -> np.ndarray:
        """Staleness of batch `step`'s weight versions (of samples or tokens, any shape);
        raises when one is outside [0, max_staleness]."""
        versions = np.asarray(versions, np.int64)
        staleness = step - versions
        if staleness.max() > self.max_staleness or staleness.min() < 0:
            raise RuntimeError(
                f"batch {step} holds weight versions {sorted(set(versions.ravel().tolist()))}"
                f": staleness {int(staleness.max())} is outside [0, max_staleness="
                f"{self.max_staleness}]. This is a bug of the runner, not of the config."
            )
        return staleness

    def record(self, step: int, versions_b: np.ndarray) -> np.ndarray:
        """Staleness [B] of batch `step`'s samples (`check`), counted in the histogram."""
        staleness_b = self.check(step, versions_b)
        for value, count in zip(*np.unique(staleness_b, return_counts=True), strict=True):
            self.counts[int(value)] = self.counts.get(int(value), 0) + int(count)
        return staleness_b

    def histogram(self) -> dict[int, int]:
        """{staleness: samples trained} so far."""
        return dict(sorted(self.counts.items()))
