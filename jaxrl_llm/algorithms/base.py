"""An algorithm is a value: pure functions over what a runner collected, in the spirit of optax.

    algorithm = jaxrl_llm.algorithms.make(config)        # registry: config.algorithm -> factory
    state = algorithm.init()
    batch, scalars = algorithm.make_batch(experience, state)      # advantages, returns, ...
    ... the runner's actor (and critic) train steps minimise algorithm.loss / critic_loss ...
    state = algorithm.update(state, scalars)                      # e.g. an adaptive KL coefficient

No loops, no I/O, no meshes: the runner owns those (`jaxrl_llm.runners`), the roles own the models
(`jaxrl_llm.roles`). `roles` says which roles the runner must build: the actor, rollout and
reward are always there; "reference" adds frozen log-probs of the initial policy to the
experience, "critic" adds the value model's predictions and trains it with `critic_loss`.
`collects` asks the run's collector for more collected data, each request a small value that
names what it fills: `GreedyBaseline()` a greedy completion of every prompt and its reward
(ReMax's baseline), `GoldReferences(template)` each prompt's gold answer as one more scored
completion (RRHF); a request of any other type is served by the function registered for it
(`jaxrl_llm.algorithms.collected.register_collected`) into `Experience.collected[name]`, so a
new per-sample field needs no runner edit. `step_rewards` asks for the process reward model's
steps and the token each ends on (dense process rewards).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_llm.algorithms.batch import PolicyBatch

Array = jax.Array
LossFn = Callable[[Any, PolicyBatch], tuple[Array, dict[str, Array]]]

# Every role a runner knows how to build (see jaxrl_llm.roles).
ROLE_NAMES = ("actor", "rollout", "reference", "critic", "reward")
ALWAYS_PRESENT = ("actor", "rollout", "reward")


class References(NamedTuple):
    """Each prompt's gold answer as one more completion, in the `Rollout` layout.

    Attributes:
      tokens: int32 [P, T] prompt, then the reference response and an end-of-turn token.
      completion_mask: bool [P, T], True at the response tokens.
      rewards: float32 [P], the reward role's score of each reference.
    """

    tokens: np.ndarray
    completion_mask: np.ndarray
    rewards: np.ndarray


class Experience(NamedTuple):
    """What a runner collected for one RL step, on the host (numpy).

    B = prompts x group size rows, T = prompt bucket + max_new_tokens columns, the layout of
    `jaxrl_llm.rollout.Rollout`.

    Attributes:
      rollout: the sampled `Rollout` (tokens, completion_mask, logprobs, lengths ...), as numpy.
      rewards: float32 [B], the total reward of each completion.
      group_size: G; rows b*G .. b*G + G - 1 share one prompt.
      ref_logp: float32 [B, T] reference log-probs when the algorithm has a "reference" role.
      values: float32 [B, T] critic values V(s_t) when it has a "critic" role (column t aligned
        with the log-prob of token t).
      baseline_rewards: float32 [B] rewards of the greedy completion of each row's prompt, when
        `baseline_rollout` is set.
      references: `References` of the B / G prompts, when `reference_template` is set.
      violations: float32 [K, B] judge verdicts (1 violated, 0 not, NaN none) of the run's
        `config.constraints` judges, when it has some (`jaxrl_llm.constraints`).
      sources: the `Example.source` of every row, [B] (prompt classes of length budgets).
      turn_rewards: float32 [B, K] each turn's reward of multi-turn episodes (NaN after an
        episode's last turn), else None (`jaxrl_llm.envs`).
      turn_index: int32 [B, T] the turn of each model token of an episode (-1 elsewhere).
      step_rewards: float32 [B, S] each process-reward step's refined, weighted reward (part of
        `rewards`; 0 at padding), when the algorithm sets `step_rewards` (dense process rewards).
      step_columns: int32 [B, S] the column of the token on which each of those steps ends
        (-1 at padding).
      collected: the values of the algorithm's registered requests, by field name
        (`jaxrl_llm.algorithms.collected.register_collected`): each an array [B, ...] whose row
        b belongs to row b of the rollout; empty when it asks for none.
    """

    rollout: Any
    rewards: np.ndarray
    group_size: int
    ref_logp: np.ndarray | None = None
    values: np.ndarray | None = None
    baseline_rewards: np.ndarray | None = None
    references: References | None = None
    violations: np.ndarray | None = None
    sources: tuple[str, ...] | None = None
    turn_rewards: np.ndarray | None = None
    turn_index: np.ndarray | None = None
    step_rewards: np.ndarray | None = None
    step_columns: np.ndarray | None = None
    collected: Mapping[str, np.ndarray] = types.MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class GreedyBaseline:
    """A collection request: a greedy completion of every prompt, scored by the reward role,
    handed over as `Experience.baseline_rewards` (ReMax's baseline)."""


@dataclasses.dataclass(frozen=True)
class GoldReferences:
    """A collection request: each prompt's gold answer rendered with `template`, laid out like
    the rollout and scored, handed over as `Experience.references` (RRHF's reference responses).

    Attributes:
      template: the response, with "{answer}" where the gold answer goes
        ("The answer is {answer}.").
    """

    template: str


# The requests the single-turn sampler serves itself, into their own `Experience` fields; any
# other request type needs a registered server (`jaxrl_llm.algorithms.collected`).
BUILT_IN_REQUESTS = (GreedyBaseline, GoldReferences)


def roles_for(kl_beta: float, *extra: str) -> tuple[str, ...]:
    """The roles of a policy-gradient algorithm: the ones always present, `extra` (e.g.
    "critic"), and "reference" exactly when a KL to it is weighted (`kl_beta > 0`)."""
    return ALWAYS_PRESENT + extra + (("reference",) if kl_beta > 0 else ())


def _no_state() -> tuple:
    return ()


def _keep_state(state, scalars):
    del scalars
    return state


class Algorithm(NamedTuple):
    """An RL algorithm as pure functions (see the module docstring).

    Attributes:
      name: the registry name.
      make_batch: `(Experience, state) -> (PolicyBatch, scalars)`: advantages and targets, plus
        host-side metrics (float) to log, e.g. {"kl_coef": 0.05}.
      loss: `(policy model, PolicyBatch) -> (loss, metrics)`, the actor's loss.
      roles: the roles it needs, a subset of `ROLE_NAMES`.
      init: `() -> state`, a pytree (checkpointed with the run); () for stateless algorithms.
      update: `(state, scalars) -> state` after each step; scalars are `make_batch`'s, plus
        "batch_size" (rows B) and the mean train metrics under "train/...".
      critic_loss: `(value model, PolicyBatch) -> (loss, metrics)` when "critic" is a role.
      actor_frozen_steps: the first RL steps update only the critic (critic warm-up).
      collects: what the run's collector must collect beside the samples, as requests
        (`GreedyBaseline()`, `GoldReferences(template)`, or one of a type registered with
        `register_collected`); a collector that cannot serve one refuses the algorithm.
      step_rewards: the runner hands the process reward model's steps over as
        `Experience.step_rewards` / `step_columns` (dense process rewards, PPO with
        `config.rewards.process_placement = "dense"`).
      critic_pretrain_steps: value pretraining: before the first RL step the runner trains
        the critic alone on this many batches of the initial policy's rollouts (not RL steps).
      critic_pretrain_batch: `(Experience, state) -> (PolicyBatch, scalars)`, the batch of a
        value-pretraining step (its `returns` are the critic's targets); needed when
        `critic_pretrain_steps > 0`.
    """

    name: str
    make_batch: Callable[[Experience, Any], tuple[PolicyBatch, dict[str, float]]]
    loss: LossFn
    roles: tuple[str, ...] = ALWAYS_PRESENT
    init: Callable[[], Any] = _no_state
    update: Callable[[Any, dict[str, float]], Any] = _keep_state
    critic_loss: LossFn | None = None
    actor_frozen_steps: int = 0
    collects: tuple[Any, ...] = ()
    step_rewards: bool = False
    critic_pretrain_steps: int = 0
    critic_pretrain_batch: Callable[[Experience, Any], tuple[PolicyBatch, dict]] | None = None

    @property
    def baseline_rollout(self) -> bool:
        """Whether it asks for a greedy baseline (`GreedyBaseline` in `collects`)."""
        return any(isinstance(request, GreedyBaseline) for request in self.collects)

    def needs(self, role: str) -> bool:
        """Whether the runner must build `role` for this algorithm."""
        if role not in ROLE_NAMES:
            raise ValueError(f"Unknown role {role!r}; roles are {ROLE_NAMES}.")
        return role in self.roles


def check_algorithm(algorithm: Algorithm) -> Algorithm:
    """Raises ValueError for an inconsistent `Algorithm` (unknown role, critic without loss)."""
    unknown = sorted(set(algorithm.roles) - set(ROLE_NAMES))
    if unknown:
        raise ValueError(
            f"algorithm {algorithm.name!r}: unknown roles {unknown}; use {ROLE_NAMES}."
        )
    missing = [r for r in ALWAYS_PRESENT if r not in algorithm.roles]
    if missing:
        raise ValueError(f"algorithm {algorithm.name!r}: roles must include {missing}.")
    if algorithm.needs("critic") != (algorithm.critic_loss is not None):
        raise ValueError(
            f"algorithm {algorithm.name!r}: a 'critic' role and a critic_loss go together."
        )
    if algorithm.critic_pretrain_steps > 0 and (
        not algorithm.needs("critic") or algorithm.critic_pretrain_batch is None
    ):
        raise ValueError(
            f"algorithm {algorithm.name!r}: critic_pretrain_steps="
            f"{algorithm.critic_pretrain_steps} needs a 'critic' role and a critic_pretrain_batch."
        )
    return algorithm
