"""CGPO's constrained optimisers as transformations of a group's rewards.

CGPO (Xu et al. 2024, "The Perfect Blend: Redefining RLHF with Mixture of Judges",
arXiv:2409.20370, section 4) updates the policy only from generations that satisfy every judge:

- CRPG, calibrated-regularized policy gradient: the reward is calibrated against a baseline
  generation of the same prompt, R_calib = sigmoid(r - r_baseline) in (0, 1), and a generation
  that violates a constraint gets 0, so only non-violating samples push the policy toward them.
  The paper's baseline is the SFT policy's generation; here it is the greedy generation
  (`Experience.baseline_rewards`) when the run decodes one, else the group's mean reward.
- CRRAFT, constrained reward-ranked fine-tuning: per prompt, the highest-reward generation among
  the non-violating ones is imitated (advantage 1), every other gets 0 (RAFT, Dong et al. 2023,
  arXiv:2304.06767, restricted to the feasible set).
- CODPO, constrained online DPO: the chosen generation is the best non-violating one, the
  rejected one the worst violating one (or the worst overall when none violates), scored here as
  r - M * violated so that online DPO's best-worst selection picks exactly those.

All take rewards [B] in groups of G adjacent rows and a bool [B] `violated` (any judge).
"""

from __future__ import annotations

import numpy as np

# CODPO's score offset for violating generations: larger than any reward spread (|r| < 5e3).
VIOLATION_OFFSET = 1e4


def _groups(x_b: np.ndarray, group_size: int) -> np.ndarray:
    x_b = np.asarray(x_b)
    if x_b.shape[0] % group_size:
        raise ValueError(f"{x_b.shape[0]} rows are not groups of {group_size}.")
    return x_b.reshape(-1, group_size)


def calibrated_rewards(
    rewards_b: np.ndarray, group_size: int, baseline_b: np.ndarray | None = None
) -> np.ndarray:
    """sigmoid(r - r_baseline), float32 [B]; the baseline is `baseline_b` [B] when given, else
    the mean reward of each row's group."""
    rewards = np.asarray(rewards_b, np.float64)
    if baseline_b is None:
        baseline = np.repeat(_groups(rewards, group_size).mean(axis=1), group_size)
    else:
        baseline = np.asarray(baseline_b, np.float64)
    return (1.0 / (1.0 + np.exp(-(rewards - baseline)))).astype(np.float32)


def crpg_rewards(
    rewards_b: np.ndarray,
    violated_b: np.ndarray,
    group_size: int,
    baseline_b: np.ndarray | None = None,
) -> np.ndarray:
    """CRPG's reward: the calibrated reward of non-violating generations, 0 for violating ones,
    float32 [B]."""
    calibrated = calibrated_rewards(rewards_b, group_size, baseline_b)
    return np.where(np.asarray(violated_b, bool), 0.0, calibrated).astype(np.float32)


def crraft_advantages(rewards_b: np.ndarray, violated_b: np.ndarray, group_size: int) -> np.ndarray:
    """CRRAFT's imitation weights, float32 [B]: 1 for each group's best non-violating generation
    (the first of equals), 0 elsewhere and for groups where every generation violates."""
    rewards = _groups(np.asarray(rewards_b, np.float64), group_size)
    violated = _groups(np.asarray(violated_b, bool), group_size)
    masked = np.where(violated, -np.inf, rewards)
    best = masked.argmax(axis=1)
    weights = np.zeros_like(rewards)
    feasible = ~violated.all(axis=1)
    weights[np.arange(len(best))[feasible], best[feasible]] = 1.0
    return weights.reshape(-1).astype(np.float32)


def codpo_scores(rewards_b: np.ndarray, violated_b: np.ndarray, group_size: int) -> np.ndarray:
    """Scores whose best / worst in a group are CODPO's chosen / rejected generations:
    r - `VIOLATION_OFFSET` * violated, float64 [B]. A group where every generation violates has
    no feasible chosen one: its scores all tie (0), which online DPO weights 0 (no pair)."""
    violated = _groups(np.asarray(violated_b, bool), group_size)
    scores = _groups(np.asarray(rewards_b, np.float64), group_size) - VIOLATION_OFFSET * violated
    scores[violated.all(axis=1)] = 0.0
    return scores.reshape(-1)
