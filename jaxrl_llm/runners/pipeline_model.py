"""A discrete-event model of synchronous against asynchronous RL steps, from measured phase times.

The two-core CPU here cannot show an asynchronous speed-up (both threads share the cores), so
`experiments/benchmarks/async_pipeline.py` measures the phases of a real run (generation and
training seconds per batch, weight-sync seconds) and this model predicts the speed-up for other
device splits, staleness bounds and generation-time spreads.

    synchronous  all G devices generate batch s, then train on it, then sync:
                     T_sync = sum_s gen_s(G) + train_s(G) + sync_s
    asynchronous generator on f G devices, learner on (1 - f) G; batch s may start once weight
                 version behaviour_version(s, k, N) is published (the learner publishes version
                 v when step v - 1 ends, after sync_s); the learner trains batch s once it is
                 generated and step s - 1 is done (`simulate_async`).

Phase times scale with devices as t(d) = t(G) (G / d)^alpha: alpha = 1 is linear scaling (data
parallel training), alpha < 1 is sublinear (decoding is memory-bound and small per-device
batches waste it, so fewer decode devices lose less than proportionally). With alpha = 1 for both
sides, splitting the devices cannot beat the synchronous run by overlap alone; the gains come
from sublinear decode scaling and from a generator that streams past each batch's longest
completion (`tail_ratio`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from jaxrl_llm.algorithms.staleness import behaviour_version


class Phases(NamedTuple):
    """Seconds per RL step on the reference device count G.

    Attributes:
      generate: [S] generation (and scoring) seconds of each batch.
      train: [S] training seconds of each batch.
      sync: weight-sync seconds per published version.
    """

    generate: Sequence[float]
    train: Sequence[float]
    sync: float


def scaled(seconds: float, fraction: float, alpha: float) -> float:
    """Seconds of a phase measured on all devices when it runs on `fraction` of them."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction={fraction} must be in (0, 1].")
    return seconds * (1.0 / fraction) ** alpha


def simulate_sync(phases: Phases) -> float:
    """Wall seconds of the synchronous run: generate, train, sync, one after another."""
    return sum(g + t + phases.sync for g, t in zip(phases.generate, phases.train, strict=True))


class AsyncTimeline(NamedTuple):
    """What `simulate_async` computed.

    Attributes:
      total_s: wall seconds until the last learner step ends.
      generator_idle_s: seconds the generator waited for weights.
      learner_idle_s: seconds the learner waited for batches.
    """

    total_s: float
    generator_idle_s: float
    learner_idle_s: float


def simulate_async(
    phases: Phases,
    *,
    max_staleness: int,
    sync_every: int = 1,
    generator_fraction: float = 0.5,
    alpha_generate: float = 1.0,
    alpha_train: float = 1.0,
    tail_ratio: float = 1.0,
) -> AsyncTimeline:
    """The asynchronous schedule's timeline (see the module docstring).

    Args:
      phases: phase seconds measured on all G devices.
      max_staleness, sync_every: k and N of `config.async_rl`.
      generator_fraction: f, the generator's share of the devices (the learner has 1 - f).
      alpha_generate, alpha_train: scaling exponents of each phase with devices.
      tail_ratio: how much less a batch costs a streaming generator: a synchronous step waits
        for its longest completion while the decode batch empties, a generator that keeps
        admitting the next batch's prompts (AReaL's interruptible generation, continuous
        batching) pays about the mean; E[longest] / E[mean] length of a batch, 1 for none.
    """
    if tail_ratio < 1:
        raise ValueError(f"tail_ratio={tail_ratio} must be >= 1.")
    generate = [scaled(g / tail_ratio, generator_fraction, alpha_generate) for g in phases.generate]
    train = [scaled(t, 1 - generator_fraction, alpha_train) for t in phases.train]
    return simulate_async_groups(
        generate, train, phases.sync, max_staleness=max_staleness, sync_every=sync_every
    )


def simulate_async_groups(
    generate_s: Sequence[float],
    train_s: Sequence[float],
    sync_s: float,
    *,
    max_staleness: int,
    sync_every: int = 1,
) -> AsyncTimeline:
    """The asynchronous timeline from each batch's seconds on its own device group.

    What `simulate_async` runs after scaling measured phases; the planner
    (`jaxrl_llm.scale.planner`) calls it with phase times predicted for the generator's and the
    learner's own meshes from their compiled programs, so no scaling exponent is guessed.

    Args:
      generate_s: [S] seconds to generate (and score) batch s on the generator's devices.
      train_s: [S] seconds to train on batch s on the learner's devices.
      sync_s: seconds of one weight publication.
      max_staleness, sync_every: k and N of `config.async_rl`.
    """
    published = {0: 0.0}  # version -> time it is available to the generator
    generator_free = learner_free = 0.0
    generator_idle = learner_idle = 0.0
    for step, (gen, train) in enumerate(zip(generate_s, train_s, strict=True)):
        needed = published[behaviour_version(step, max_staleness, sync_every)]
        start = max(generator_free, needed)
        generator_idle += start - generator_free
        generator_free = start + gen
        learn_start = max(learner_free, generator_free)
        learner_idle += learn_start - learner_free
        learner_free = learn_start + train
        if (step + 1) % sync_every == 0:
            learner_free += sync_s
            published[step + 1] = learner_free
    return AsyncTimeline(learner_free, generator_idle, learner_idle)


def speedup(phases: Phases, **async_options) -> float:
    """Synchronous wall time over asynchronous wall time (> 1: asynchronous is faster)."""
    return simulate_sync(phases) / simulate_async(phases, **async_options).total_s


def best_split(phases: Phases, fractions: Sequence[float], **async_options) -> tuple[float, float]:
    """(generator fraction, speed-up) of the best of `fractions`."""
    results = [(f, speedup(phases, generator_fraction=f, **async_options)) for f in fractions]
    return max(results, key=lambda r: r[1])
