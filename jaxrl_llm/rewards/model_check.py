"""Does a learned reward model still agree with the verifier on what the policy samples?

A policy trained against a reward model finds where the model is wrong: its reward keeps rising
while the true ("gold") reward falls (Gao, Schulman and Hilton, "Scaling Laws for Reward Model
Overoptimization", arXiv 2210.10760). Where the task has a verifier, the gold reward is at hand
on every step's own samples, so the divergence can be watched as it happens rather than found
at the held-out evaluation. The check is the AUC of the model's scores as a classifier of the
verifier's verdicts (Mann-Whitney U over the step's right and wrong samples): 1 when every right
sample outscores every wrong one, 0.5 at chance, below 0.5 when the model prefers wrong answers.

    auc = verifier_auc(model_scores_b, task_scores_b)     # None: all right or all wrong
    check = ModelCheck(min_auc=0.6, steps=3)
    if check.observe(auc):                                 # 3 steps in a row under 0.6
        ...                                                # flag, or stop the run

`config.rewards.model_check_*` turn it on in an RL run (`runners.hooks.RewardModelCheck`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = [
    "MODEL_CHECK_ACTIONS",
    "ModelCheck",
    "model_verifier_scalars",
    "validate_model_check",
    "verifier_auc",
]

# What a run does when the check trips: warn and log it, or end the run after the step.
MODEL_CHECK_ACTIONS = ("flag", "stop")
AUC_KEY = "reward/model_verifier_auc"


def verifier_auc(scores_b, task_scores_b) -> float | None:
    """P(a right sample's score > a wrong sample's score), ties counting 1/2.

    Args:
      scores_b: float [B], the learned reward of each sample.
      task_scores_b: float [B], the verifier's score of each sample; 1.0 is right, anything
        else wrong (partial credit is not right, as `rewards.accuracy` counts it).

    Returns:
      The AUC in [0, 1], or None when the samples are all right or all wrong (nothing to rank).

    Example:
      >>> verifier_auc([0.9, 0.2, 0.5], [1.0, 0.0, 0.0])
      1.0
      >>> verifier_auc([0.1, 0.8], [1.0, 0.0])
      0.0
    """
    scores = np.asarray(scores_b, np.float64).reshape(-1)
    right = np.asarray(task_scores_b, np.float64).reshape(-1) == 1.0
    if scores.shape != right.shape:
        raise ValueError(
            f"verifier_auc: {scores.shape[0]} scores and {right.shape[0]} verdicts; give one "
            "of each per sample."
        )
    if right.all() or not right.any():
        return None
    diff_rw = scores[right][:, None] - scores[~right][None, :]
    return float(np.mean((diff_rw > 0) + 0.5 * (diff_rw == 0)))


def model_verifier_scalars(per_function: Mapping[str, np.ndarray]) -> dict[str, float]:
    """{"reward/model_verifier_auc": AUC} of a step's rewards (`RewardOutput.per_function`),
    when they hold a learned reward ("model") and the verifier's ("task") and the step's
    samples hold both right and wrong ones; else {}."""
    if "model" not in per_function or "task" not in per_function:
        return {}
    auc = verifier_auc(per_function["model"], per_function["task"])
    return {} if auc is None else {AUC_KEY: auc}


class ModelCheck:
    """Counts the steps in a row whose AUC is under `min_auc`; trips at `steps` of them.

    A step without an AUC (its samples all right or all wrong) neither extends nor ends a run
    of low steps. After tripping the count starts again, so "flag" flags each such streak once.

    Example:
      >>> check = ModelCheck(min_auc=0.6, steps=2)
      >>> [check.observe(a) for a in (0.9, 0.5, None, 0.4, 0.3)]
      [False, False, False, True, False]
    """

    def __init__(self, *, min_auc: float, steps: int):
        self.min_auc, self.steps, self.low = min_auc, steps, 0

    def observe(self, auc: float | None) -> bool:
        """Takes one step's AUC (or None); True when this step completes a streak."""
        if auc is None:
            return False
        self.low = self.low + 1 if auc < self.min_auc else 0
        if self.low >= self.steps:
            self.low = 0
            return True
        return False


def validate_model_check(section) -> None:
    """Raises ValueError naming the first bad `config.rewards.model_check_*` field and the fix."""
    min_auc = section.get("model_check_auc", 0.0)
    steps = section.get("model_check_steps", 3)
    action = section.get("model_check_action", "flag")
    if not 0.0 <= min_auc <= 1.0:
        raise ValueError(
            f"config.rewards.model_check_auc={min_auc} must be in [0, 1] (an AUC; 0.5 is "
            "chance, 0 turns the check off)."
        )
    if min_auc > 0 and not section.get("model", ""):
        raise ValueError(
            f"config.rewards.model_check_auc={min_auc} checks a learned reward model against "
            "the verifier, and config.rewards.model is empty: set config.rewards.model or "
            "model_check_auc=0."
        )
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(
            f"config.rewards.model_check_steps={steps!r} must be an integer >= 1 (steps in a "
            "row under model_check_auc before the check trips)."
        )
    if action not in MODEL_CHECK_ACTIONS:
        raise ValueError(
            f"config.rewards.model_check_action={action!r} must be one of {MODEL_CHECK_ACTIONS}."
        )
