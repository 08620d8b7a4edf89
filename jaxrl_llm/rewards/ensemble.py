"""Combining the scores of several reward models: mean, min (conservative) and mean - k * std.

See "Reward Model Ensembles Help Mitigate Overoptimization" (Coste et al. 2023, 2310.02743):
worst-case (min) and uncertainty-weighted (mean - k * std) optimisation resist reward hacking
that a single model's score invites.
"""

from __future__ import annotations

import numpy as np

ENSEMBLE_MODES = ("mean", "min", "mean_minus_std")


def combine_scores(scores_mb, *, mode: str = "mean", k: float = 1.0) -> np.ndarray:
    """One score per sample from M models' scores.

    Args:
      scores_mb: float [M, B], model m's score of sample b.
      mode: "mean", "min" or "mean_minus_std" (mean - k * std over models, population std).
      k: the std weight of "mean_minus_std" (>= 0).

    Returns:
      float32 [B].

    Example:
      >>> combine_scores([[1.0, 2.0], [3.0, 2.0]], mode="mean_minus_std", k=1.0)
      array([1., 2.], dtype=float32)
    """
    scores = np.asarray(scores_mb, np.float32)
    if scores.ndim != 2 or scores.shape[0] < 1:
        raise ValueError(f"combine_scores: scores must be [M >= 1, B], got {scores.shape}.")
    if mode == "mean":
        return scores.mean(axis=0)
    if mode == "min":
        return scores.min(axis=0)
    if mode == "mean_minus_std":
        if k < 0:
            raise ValueError(f"combine_scores: k={k} must be >= 0.")
        return (scores.mean(axis=0) - k * scores.std(axis=0)).astype(np.float32)
    raise ValueError(f"combine_scores: mode={mode!r} must be one of {ENSEMBLE_MODES}.")


class EnsembleReward:
    """Several reward models scored as one (`roles.reward.ModelReward`-like callables).

    Example:
      >>> ensemble = EnsembleReward([ModelReward(rm_a, tok), ModelReward(rm_b, tok)], mode="min")
      >>> scores_b = ensemble(prompts, completions)
    """

    def __init__(self, models, *, mode: str = "mean", k: float = 1.0):
        if not models:
            raise ValueError("EnsembleReward: give at least one reward model.")
        if mode not in ENSEMBLE_MODES:
            raise ValueError(f"EnsembleReward: mode={mode!r} must be one of {ENSEMBLE_MODES}.")
        self.models, self.mode, self.k = list(models), mode, k

    def __call__(self, prompts, completions) -> np.ndarray:
        """float32 [B] combined scores."""
        scores = [model(prompts, completions) for model in self.models]
        return combine_scores(np.stack(scores), mode=self.mode, k=self.k)
