"""Constraints held by Lagrangian multipliers, updated by dual ascent.

The constrained problem  max_pi E[r]  s.t.  E[c_k] <= d_k  (k = 1..K)  is relaxed to the
Lagrangian  E[r - sum_k lambda_k c_k] + sum_k lambda_k d_k, maximised over the policy by the
usual RL update on the shaped reward, and minimised over lambda >= 0 by projected gradient
descent on the dual, i.e. dual ascent on the constraint violation:
    lambda_k <- clip(lambda_k + eta * (mean(c_k) - d_k), 0, lambda_max)
(Tessler et al. 2019, "Reward Constrained Policy Optimization", arXiv:1805.11074; the
multi-objective RLHF form of Moskovitz et al. 2023, "Confronting Reward Model Overoptimization
with Constrained RLHF", arXiv:2310.04373). A multiplier grows while its constraint is violated
and decays to 0 once it holds with slack. Pure numpy: the multipliers are host-side algorithm
state, checkpointed with the run.
"""

from __future__ import annotations

import numpy as np


def lagrangian_rewards(
    rewards_b: np.ndarray, costs_kb: np.ndarray, multipliers_k: np.ndarray
) -> np.ndarray:
    """Shaped rewards r_b - sum_k lambda_k c_kb, float32 [B].

    Args:
      rewards_b: float [B] task rewards.
      costs_kb: float [K, B] constraint costs (e.g. 1.0 for a judge's violation, a length);
        NaN (no verdict) costs nothing.
      multipliers_k: float [K] lambda_k >= 0.
    """
    costs = np.nan_to_num(np.asarray(costs_kb, np.float64), nan=0.0)
    lam = np.asarray(multipliers_k, np.float64)
    if costs.ndim != 2 or costs.shape[0] != lam.shape[0] or costs.shape[1] != len(rewards_b):
        raise ValueError(
            f"lagrangian_rewards: costs {costs.shape} must be [K, B] with K = "
            f"{lam.shape[0]} multipliers and B = {len(rewards_b)} rewards."
        )
    return (np.asarray(rewards_b, np.float64) - lam @ costs).astype(np.float32)


def constraint_values(costs_kb: np.ndarray) -> np.ndarray:
    """float [K] batch means of each cost over the samples that have one (NaN-free rows of 0
    samples count 0: no evidence of a violation)."""
    costs = np.asarray(costs_kb, np.float64)
    counts = (~np.isnan(costs)).sum(axis=1)
    sums = np.nansum(costs, axis=1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)


def dual_ascent(
    multipliers_k: np.ndarray,
    values_k: np.ndarray,
    bounds_k: np.ndarray,
    *,
    learning_rate: float,
    max_multiplier: float = np.inf,
) -> np.ndarray:
    """One projected dual step: clip(lambda + eta (g - d), 0, lambda_max), float32 [K].

    Args:
      multipliers_k: current lambda [K].
      values_k: this batch's constraint values g_k = mean cost [K].
      bounds_k: the bounds d_k [K] (the constraint is g_k <= d_k).
      learning_rate: eta > 0.
      max_multiplier: an upper clip that keeps one bad batch from dominating the reward.
    """
    if not learning_rate > 0:
        raise ValueError(f"dual_ascent: learning_rate={learning_rate} must be > 0.")
    step = np.asarray(values_k, np.float64) - np.asarray(bounds_k, np.float64)
    new = np.asarray(multipliers_k, np.float64) + learning_rate * step
    return np.clip(new, 0.0, max_multiplier).astype(np.float32)
