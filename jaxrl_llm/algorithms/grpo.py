"""GRPO: group-relative advantages with the PPO-clip surrogate and a KL penalty to a reference.

See "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models"
(arXiv:2402.03300). For each prompt, G completions are sampled; with rewards r_1..r_G,

    A_i   = (r_i - mean(r)) / (std(r) + eps)                    (grpo advantages, unbiased std)
    loss  = agg_t[ max(-A_i r_it, -A_i clip(r_it, 1 - e_low, 1 + e_high)) ]
            + beta * agg_t[ k3(pi_theta, pi_ref)_it ] - c_H * agg_t[ H_it ]

with r_it = pi_theta(o_it | q, o_i,<t) / pi_old(o_it | q, o_i,<t). DAPO's clip-higher is
`clip_high > clip_low`; Dr. GRPO is `normalize_std=False` with "seq-mean-token-sum-norm";
`advantage="rloo"` is the leave-one-out baseline of "Buy 4 REINFORCE Samples, Get a Baseline
for Free!". The loss is the shared `policy_loss`; this module adds the advantages.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxrl_llm import advantages as advantages_lib
from jaxrl_llm.algorithms import registry
from jaxrl_llm.algorithms.base import Algorithm, Experience, roles_for
from jaxrl_llm.algorithms.batch import PolicyBatch, build_batch, pack_batch, split_minibatches
from jaxrl_llm.algorithms.policy_loss import (
    PolicyLossConfig,
    policy_loss,
    policy_loss_section,
    validate_loss_section,
)

# The names GRPO had before the shared pieces moved out; kept for notebooks and user code.
GRPOBatch = PolicyBatch
GRPOLossConfig = PolicyLossConfig
grpo_loss = policy_loss

__all__ = [
    "GRPOBatch",
    "GRPOLossConfig",
    "build_batch",
    "default_config",
    "group_advantages",
    "grpo_loss",
    "make",
    "pack_batch",
    "split_minibatches",
    "validate",
]


def group_advantages(
    rewards_b: np.ndarray, group_size: int, *, estimator: str = "grpo", normalize_std: bool = True
) -> np.ndarray:
    """Per-sequence advantages [B] of rewards [B] laid out as B / G groups of G adjacent rows.

    `estimator` is one of `advantages.GROUP_ESTIMATORS`: "grpo" (DeepSeekMath;
    `normalize_std=False` is Dr. GRPO) or "rloo" (leave-one-out baseline).
    """
    rewards_b = np.asarray(rewards_b, np.float32)
    if rewards_b.shape[0] % group_size:
        raise ValueError(
            f"group_advantages: {rewards_b.shape[0]} rewards is not a multiple of {group_size=}."
        )
    rewards_bg = jnp.asarray(rewards_b.reshape(-1, group_size))
    if estimator == "grpo":
        adv = advantages_lib.grpo(rewards_bg, normalize_std=normalize_std)
    elif estimator == "rloo":
        adv = advantages_lib.rloo(rewards_bg)
    else:
        raise ValueError(
            f"group_advantages: {estimator=} must be one of {advantages_lib.GROUP_ESTIMATORS}."
        )
    return np.asarray(adv, np.float32).reshape(-1)


def default_config() -> dict[str, ml_collections.ConfigDict]:
    """GRPO's config section: `loss` (the shared policy-loss fields and the group estimator)."""
    loss = policy_loss_section()
    # Advantage estimator: "grpo" or "rloo"; normalize_std=False is Dr. GRPO.
    loss.advantage = "grpo"
    loss.normalize_std = True
    return {"loss": loss}


def validate(config: ml_collections.ConfigDict) -> None:
    """GRPO's rules: the shared loss fields, a known estimator, groups of at least 2."""
    validate_loss_section(config)
    if config.loss.advantage not in advantages_lib.GROUP_ESTIMATORS:
        raise ValueError(
            f"config.loss.advantage={config.loss.advantage!r} must be one of "
            f"{advantages_lib.GROUP_ESTIMATORS}."
        )
    if config.rollout.group_size < 2:
        raise ValueError(
            "config.rollout.group_size must be >= 2: GRPO compares completions within a group."
        )


def make(config: ml_collections.ConfigDict) -> Algorithm:
    """GRPO from a run config; a "reference" role only when `config.loss.kl_beta > 0`."""
    loss_config = PolicyLossConfig.from_config(config)
    estimator, normalize_std = config.loss.advantage, config.loss.normalize_std

    def make_batch(experience: Experience, state) -> tuple[PolicyBatch, dict[str, float]]:
        del state
        adv_b = group_advantages(
            experience.rewards,
            experience.group_size,
            estimator=estimator,
            normalize_std=normalize_std,
        )
        return build_batch(experience.rollout, adv_b, ref_logp=experience.ref_logp), {}

    def loss(model, batch):
        return policy_loss(model, batch, config=loss_config)

    roles = roles_for(loss_config.kl_beta)
    return Algorithm(name="grpo", make_batch=make_batch, loss=loss, roles=roles)


registry.register("grpo", make=make, default_config=default_config, validate=validate)
