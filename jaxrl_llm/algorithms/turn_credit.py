"""Turn-level credit for multi-turn episodes: a GRPO-family algorithm with per-turn advantages.

With one outcome reward per episode, every model token of an episode shares one advantage (the
algorithm's own, e.g. GRPO's group-normalised reward). With per-turn rewards (Multi-IF scores
each reply), `with_turn_credit` replaces it by the advantage of the token's turn: the turn's
return (its own and later turns' rewards, discounted by `gamma`) against the returns of the
same turn in the other episodes of its prompt (`advantages.group_turn_advantages`). See REFUEL
(arXiv:2410.04612) and ArCHer (arXiv:2402.19446) for turn-level credit in multi-turn RL.

    algorithm = with_turn_credit(registry.make(config), gamma=1.0)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxrl_llm import advantages as advantages_lib
from jaxrl_llm.algorithms.base import Algorithm, Experience

__all__ = ["token_turn_advantages", "with_turn_credit"]


def token_turn_advantages(
    turn_rewards_bk: np.ndarray,
    turn_index_bt: np.ndarray,
    group_size: int,
    *,
    gamma: float = 1.0,
    normalize_std: bool = True,
) -> np.ndarray:
    """float32 [B, T] advantages: each model token gets its turn's group-relative return.

    Args:
      turn_rewards_bk: [B, K] each turn's reward, NaN for turns the episode did not reach.
      turn_index_bt: int [B, T] the turn of each model token, -1 elsewhere.
      group_size: G; rows b*G .. b*G + G - 1 share a prompt.
      gamma: discount of later turns' rewards in a turn's return.
      normalize_std: divide by the group std at each turn (GRPO) or only centre (Dr. GRPO).

    Example:
      >>> token_turn_advantages(np.array([[1.0, 0.0], [0.0, 0.0]]),
      ...                       np.array([[0, 1, -1], [0, 1, 1]]), 2, normalize_std=False)
      array([[ 0.5,  0. ,  0. ],
             [-0.5,  0. ,  0. ]], dtype=float32)
    """
    rewards = np.asarray(turn_rewards_bk, np.float32)
    b, k = rewards.shape
    if b % group_size:
        raise ValueError(f"token_turn_advantages: {b} episodes is not a multiple of {group_size=}.")
    mask = ~np.isnan(rewards)
    returns = advantages_lib.discounted_returns(
        jnp.asarray(np.nan_to_num(rewards)), jnp.asarray(mask), gamma=gamma
    )
    adv_bgk = advantages_lib.group_turn_advantages(
        returns.reshape(-1, group_size, k),
        jnp.asarray(mask).reshape(-1, group_size, k),
        normalize_std=normalize_std,
    )
    adv_bk = np.asarray(adv_bgk, np.float32).reshape(b, k)
    index = np.asarray(turn_index_bt)
    token_adv = np.take_along_axis(adv_bk, np.clip(index, 0, k - 1), axis=1)
    return np.where(index >= 0, token_adv, 0.0).astype(np.float32)


def with_turn_credit(algorithm: Algorithm, *, gamma: float = 1.0) -> Algorithm:
    """`algorithm` with its advantages replaced by `token_turn_advantages` (its batch rows must
    be the experience's rows, as GRPO's are); needs `Experience.turn_rewards` / `turn_index`."""

    def make_batch(experience: Experience, state):
        if experience.turn_rewards is None or experience.turn_index is None:
            raise ValueError(
                "turn credit needs multi-turn episodes (config.env.name set): the experience "
                "has no turn_rewards."
            )
        batch, scalars = algorithm.make_batch(experience, state)
        if batch.tokens.shape[0] != experience.turn_rewards.shape[0]:
            raise ValueError(
                f"turn credit: algorithm {algorithm.name!r} built {batch.tokens.shape[0]} rows "
                f"from {experience.turn_rewards.shape[0]} episodes; it needs one row each."
            )
        adv_bt = token_turn_advantages(
            experience.turn_rewards, experience.turn_index, experience.group_size, gamma=gamma
        )
        mask = np.asarray(experience.rollout.completion_mask)
        scalars = {
            **scalars,
            "turn_advantage_abs": float(np.abs(adv_bt[mask]).mean()) if mask.any() else 0.0,
        }
        return batch._replace(advantages=jnp.asarray(adv_bt)), scalars

    return algorithm._replace(make_batch=make_batch)
