"""ReMax: REINFORCE with the reward of the greedy completion as the baseline.

See "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for Aligning Large
Language Models" (2310.10505), Algorithm 1. For prompt x with sampled completion y and greedy
completion y_greedy:

    A(x, y) = r(x, y) - r(x, y_greedy)

and the actor minimises the (clipped, equal to REINFORCE on the first, on-policy update)
surrogate with this per-sequence advantage, plus an optional KL term to the reference in the
loss. It asks the run's collector for a `GreedyBaseline()`: each prompt decoded greedily once per
step and scored with the same reward functions; no critic, no group needed (group_size 1 works).
"""

from __future__ import annotations

import ml_collections
import numpy as np

from jaxrl_llm import advantages as advantages_lib
from jaxrl_llm.algorithms import registry
from jaxrl_llm.algorithms.base import Algorithm, Experience, GreedyBaseline, roles_for
from jaxrl_llm.algorithms.batch import PolicyBatch, build_batch
from jaxrl_llm.algorithms.policy_loss import (
    PolicyLossConfig,
    policy_loss,
    policy_loss_section,
    validate_loss_section,
)

__all__ = ["default_config", "make", "validate"]


def default_config() -> dict[str, ml_collections.ConfigDict]:
    """ReMax's `loss` section: the shared policy-loss fields (KL in the loss when > 0)."""
    return {"loss": policy_loss_section()}


def validate(config: ml_collections.ConfigDict) -> None:
    """ReMax's rules: the shared loss fields."""
    validate_loss_section(config)


def make(config: ml_collections.ConfigDict) -> Algorithm:
    """ReMax from a run config; a "reference" role when `config.loss.kl_beta > 0`."""
    loss_config = PolicyLossConfig.from_config(config)

    def make_batch(experience: Experience, state) -> tuple[PolicyBatch, dict[str, float]]:
        del state
        if experience.baseline_rewards is None:
            raise ValueError("remax: the experience has no baseline_rewards (greedy rollout).")
        rewards_b = np.asarray(experience.rewards, np.float32)
        baseline_b = np.asarray(experience.baseline_rewards, np.float32)
        adv_b = np.asarray(advantages_lib.remax(rewards_b, baseline_b))
        batch = build_batch(experience.rollout, adv_b, ref_logp=experience.ref_logp)
        return batch, {"baseline_reward": float(baseline_b.mean())}

    def loss(model, batch):
        return policy_loss(model, batch, config=loss_config)

    roles = roles_for(loss_config.kl_beta)
    return Algorithm(
        name="remax", make_batch=make_batch, loss=loss, roles=roles, collects=(GreedyBaseline(),)
    )


registry.register("remax", make=make, default_config=default_config, validate=validate)
