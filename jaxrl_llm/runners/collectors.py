"""What a collector is: prompts (or environments) in, one RL step's `Generated` out.

An online run is a collector and a schedule put together (`jaxrl_llm.runners.online`). The
collector decides what a step's samples are (`SingleTurnSampler`: G completions per prompt;
`EpisodePlayer`: G multi-turn episodes per prompt), how the policy is evaluated on held-out
prompts, and what it adds to the experience and the step's metrics. The schedule
(`jaxrl_llm.runners.online_sync`, `online_async`) decides when it collects and with which
weights. An algorithm asks for more collected data (a greedy baseline, gold references, or a
field with a registered server, `jaxrl_llm.algorithms.collected`) through `Algorithm.collects`;
a collector serves those requests or refuses the algorithm (`Collector.check`, before the model
loads).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import ml_collections
import numpy as np

from jaxrl_llm.algorithms.base import References
from jaxrl_llm.algorithms.collected import check_served
from jaxrl_llm.runners.hooks import RunContext

__all__ = ["Collector", "Generated", "rollout_seed", "round_seed"]


def rollout_seed(seed: int, step: int) -> int:
    """The sampling seed of RL step `step` (row b then uses fold_in(key(seed), b))."""
    return (seed * 1_000_003 + step) % (2**31 - 1)


def round_seed(config: ml_collections.ConfigDict, step: int, round_index: int) -> int:
    """The sampling seed of round `round_index` of RL step `step`: round 0 is the step's own;
    round r > 0 (dynamic sampling) is that of step `step + r * num_steps`, one no step of the
    run uses."""
    return rollout_seed(config.seed, step + round_index * config.train.num_steps)


class Generated(NamedTuple):
    """One RL step's prompts, samples and rewards, on the host: what a collector produces.

    Attributes:
      examples: the step's prompts (`Example`s), each sampled G times.
      rollout: the sampled `Rollout` (numpy), B = prompts x G rows.
      completions: [B] decoded completion texts.
      reward_out: the reward role's `RewardOutput` of every row.
      baseline_rewards: float32 [B] greedy-baseline rewards (`GreedyBaseline`), else None.
      work: the rollout's `DecodeWork`.
      seconds: {"rollout": sampling seconds (and those of the algorithm's requests),
        "reward": scoring seconds}.
      versions_bt: int32 [B, T] weight version of each completion token (-1 elsewhere) of a
        rollout with in-flight updates (the weights may change between decode chunks); else
        None (one version, the batch's).
      references: the prompts' gold answers as completions (`GoldReferences`).
      episodes: the `jaxrl_llm.envs.EpisodeBatch` of multi-turn episodes (`config.env`), whose
        `rollout` is `rollout`; None for single-turn rollouts.
      scalars: metrics of how the step's samples were collected (the stabilisers': sampling
        rounds, kept groups, overlong shaping), logged with the step; None for none.
      collected: the registered requests' values by field name, each [B, ...] (one row per
        sample; `Experience.collected`); None for none.
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
    collected: dict[str, np.ndarray] | None = None


class Collector:
    """The interface of a collector, with the defaults of one that adds nothing.

    Attributes:
      eval_sets: the held-out `EvalSet`s `evaluate` scores, the run's task first.
      eval_correct: per-question correctness of the last evaluation ({} when not kept).
      eval_details: its per-question answers (`Evaluator.details`; optional).
      description: the collector in a refusal ("the single-turn sampler").
      served_requests: the request types it serves itself (registered ones come on top).
      unserved_fix: what to do about a built-in request it does not serve.
    """

    eval_sets: list
    eval_correct: dict[str, Any]
    description = "this collector"
    served_requests: tuple[type, ...] = ()
    unserved_fix = ""

    @classmethod
    def check(cls, algorithm) -> None:
        """Refuses, in one line naming the request, an algorithm that asks for something this
        collector cannot serve (`jaxrl_llm.algorithms.collected.check_served`); called before
        the run loads its model."""
        check_served(
            algorithm, cls.served_requests, collector=cls.description, fix=cls.unserved_fix
        )

    def start(self, run: RunContext) -> None:
        """Called once the run is restored, before the schedule starts (e.g. a warm-up)."""

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics of the actor's current weights, and the seconds they took."""
        raise NotImplementedError

    def generate(self, step: int, params, *, weights=None, round_index: int = 0) -> Generated:
        """One round of RL step `step`'s samples, made with `params` (decode layout).

        Args:
          step: the RL step.
          params: the rollout's weights.
          weights: a source of the newest (version, params) to take between decode chunks
            (in-flight updates), or None.
          round_index: the sampling round of the step (dynamic sampling draws more than one).
        """
        raise NotImplementedError

    def experience_fields(self, generated: Generated) -> dict[str, Any]:
        """More `Experience` fields of a step's samples (none here)."""
        del generated
        return {}

    def generated_scalars(self, generated: Generated) -> dict[str, float]:
        """More metrics of a step's samples, logged with the step's (none here)."""
        del generated
        return {}
