"""Roles: each a model (or a head on a trunk) + its mesh + its rule set + its jitted programs.

  actor      `Learner` over the policy: train state in the train layout, jitted donated step
  rollout    `RolloutWorker`: the generator, reading the actor's weights in the decode layout
  reference  `Reference`: log-probs of the initial policy, frozen or moved as an average
  critic     `Critic`: a value model (`ScalarHeadModel`), its own train state and optimizer
  reward     `RewardRole`: reward functions, optionally plus a reward model batched on device

The frozen forwards (reference, critic values, reward model) run a step's rows in chunks of
`config.rollout.forward_batch` (`forward_batch_of`, `in_row_chunks`).

`Placement` (colocated or split) gives each its mesh. Runners build the roles an algorithm asks
for (`Algorithm.roles`) and drive them; algorithms never touch them.
"""

from jaxrl_llm.roles.critic import Critic, init_value_model
from jaxrl_llm.roles.forwards import forward_batch_of, in_row_chunks
from jaxrl_llm.roles.learner import Learner, place_batch
from jaxrl_llm.roles.placement import MESH_AXES, Placement, make_placement, validate_placement
from jaxrl_llm.roles.reference import Reference, reference_section, validate_reference_section
from jaxrl_llm.roles.reward import ModelReward, RewardRole
from jaxrl_llm.roles.rollout import RolloutWorker

__all__ = [
    "MESH_AXES",
    "Critic",
    "Learner",
    "ModelReward",
    "Placement",
    "Reference",
    "RewardRole",
    "RolloutWorker",
    "forward_batch_of",
    "in_row_chunks",
    "init_value_model",
    "make_placement",
    "place_batch",
    "reference_section",
    "validate_placement",
    "validate_reference_section",
]
