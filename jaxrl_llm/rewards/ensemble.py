"""Combining the scores of several reward models: mean, min (conservative) and mean - k * std;
and whitening a model's scores over the batch.

See "Reward Model Ensembles Help Mitigate Overoptimization" (Coste et al. 2023, 2310.02743):
worst-case (min) and uncertainty-weighted (mean - k * std) optimisation resist reward hacking
that a single model's score invites. A reward model's scores have an arbitrary offset and scale
(a Bradley-Terry model learns differences only), so members trained apart are put on one scale
before they are combined by whitening each over the batch (`WhitenedReward`; TRL's PPO
`whiten_rewards` does the same to a single model's rewards).
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


def whiten_scores(scores_b, eps: float = 1e-6) -> np.ndarray:
    """float32 [B]: `scores_b` minus their mean over their std (population), over the batch;
    all zeros when the batch's scores are all equal (or it holds one sample).

    Example:
      >>> whiten_scores([1.0, 3.0])
      array([-1.,  1.], dtype=float32)
    """
    scores = np.asarray(scores_b, np.float64).reshape(-1)
    std = scores.std()
    if std < eps:
        return np.zeros(scores.shape, np.float32)
    return ((scores - scores.mean()) / std).astype(np.float32)


class WhitenedReward:
    """A reward model (`roles.reward.ModelReward`-like callable) whose scores are whitened over
    each batch it scores (`whiten_scores`): mean 0 and std 1 across the step's samples.

    Example:
      >>> rm = WhitenedReward(ModelReward(model, tokenizer))
      >>> scores_b = rm(prompts, completions)           # mean 0, std 1 over the batch
    """

    def __init__(self, model):
        self.model = model
        self.last_raw: np.ndarray | None = None  # float32 [B], the last batch before whitening

    def __call__(self, prompts, completions) -> np.ndarray:
        """float32 [B] whitened scores."""
        self.last_raw = np.asarray(self.model(prompts, completions), np.float32).reshape(-1)
        return whiten_scores(self.last_raw)


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


def raw_scores(model) -> np.ndarray | None:
    """float32 [B]: what a whitened reward model (or an ensemble of them) scored its last batch
    before whitening, the mean over an ensemble's members; None for a model not whitened.

    Whitened scores average 0 at every step, so they cannot show a policy pushing the model's
    score up; these can (`reward/model_raw`).
    """
    if isinstance(model, WhitenedReward):
        return model.last_raw
    if isinstance(model, EnsembleReward):
        members = [raw_scores(m) for m in model.models]
        if members and all(m is not None for m in members):
            return np.mean(members, axis=0).astype(np.float32)
    return None
