"""Turn-level credit: returns per turn, group baselines per turn, advantages per token."""

import jax.numpy as jnp
import numpy as np

from jaxrl_llm import advantages
from jaxrl_llm.algorithms.turn_credit import token_turn_advantages


def test_group_turn_advantages_hand_worked():
    returns = jnp.array([[[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]])
    mask = jnp.array([[[1, 1], [1, 1], [1, 0]]])
    centred = advantages.group_turn_advantages(returns, mask, normalize_std=False)
    np.testing.assert_allclose(centred, [[[1 / 3, 0.5], [-2 / 3, -0.5], [1 / 3, 0.0]]], atol=1e-6)
    scaled = advantages.group_turn_advantages(returns, mask)
    # turn 0: mean 2/3, unbiased std sqrt(1/3); turn 1: mean 0.5, std sqrt(0.5)
    np.testing.assert_allclose(
        scaled[0, :, 0], np.array([1, -2, 1]) / 3 / np.sqrt(1 / 3), atol=1e-5
    )
    np.testing.assert_allclose(scaled[0, :2, 1], np.array([0.5, -0.5]) / np.sqrt(0.5), atol=1e-5)
    assert scaled[0, 2, 1] == 0.0


def test_token_turn_advantages_use_later_turns_rewards():
    # two episodes of one prompt; episode 0 scores later, episode 1 earlier
    rewards = np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)
    turn_index = np.array([[0, 0, -1, 1], [0, -1, 1, 1]])
    adv = token_turn_advantages(rewards, turn_index, 2, normalize_std=False)
    # returns (gamma 1): episode 0 [1, 1], episode 1 [1, 0]: turn 0 ties, turn 1 differs
    np.testing.assert_allclose(adv, [[0, 0, 0, 0.5], [0, 0, -0.5, -0.5]])
    discounted = token_turn_advantages(rewards, turn_index, 2, gamma=0.5, normalize_std=False)
    # returns: episode 0 [0.5, 1], episode 1 [1, 0]
    np.testing.assert_allclose(discounted, [[-0.25, -0.25, 0, 0.5], [0.25, 0, -0.5, -0.5]])


def test_unreached_turns_have_no_baseline():
    rewards = np.array([[1.0, np.nan], [0.0, 1.0]], np.float32)
    adv = token_turn_advantages(rewards, np.array([[0, 1], [0, 1]]), 2, normalize_std=False)
    # turn 1: only episode 1 reached it (episode 0's index 1 points at no reward): 0
    np.testing.assert_allclose(adv, [[0.0, 0.0], [0.0, 0.0]])
