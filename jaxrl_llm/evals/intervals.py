"""Confidence intervals for accuracies measured over seeds and questions.

A held-out accuracy varies with the training seed and with which questions were drawn. Both are
resampled here at once (a crossed two-way bootstrap): each replicate draws S seeds with
replacement and, independently, Q question indices with replacement, shared by every drawn
seed (all runs of a group answer the same held-out questions), and averages the [S, Q] table
they select. The 2.5th and 97.5th percentiles of the replicates give the 95% interval
(percentile bootstrap; Efron & Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 13;
for crossed random effects, Owen, "The pigeonhole bootstrap", Ann. Appl. Stat. 2007).

A gain is bootstrapped the same way on the [S, Q] table of after - before, so it stays paired by
seed and question.

Example:
  >>> import numpy as np
  >>> correct = np.array([[1, 0, 1, 1], [1, 1, 0, 1]])   # 2 seeds x 4 questions
  >>> interval = seeds_questions_interval(correct)
  >>> interval.mean
  0.75
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "Interval",
    "clustered_difference_interval",
    "difference_interval",
    "percentile_interval",
    "seeds_questions_interval",
]


class Interval(NamedTuple):
    """A point estimate and its confidence interval.

    Attributes:
      mean: the mean over every seed and question.
      low, high: the interval's ends.
      confidence: its level, e.g. 0.95.
    """

    mean: float
    low: float
    high: float
    confidence: float = 0.95

    def excludes_zero(self) -> bool:
        """True when the whole interval lies above or below 0 (a gain worth the name)."""
        return self.low > 0.0 or self.high < 0.0


def seeds_questions_interval(
    values_sq: np.ndarray,
    *,
    confidence: float = 0.95,
    num_resamples: int = 4000,
    seed: int = 0,
) -> Interval:
    """The mean of `values_sq` with a bootstrap interval over seeds and questions.

    Args:
      values_sq: [S, Q] per seed and question, e.g. 0/1 correctness or after - before. A run
        without per-question results enters as one column ([S, 1]): then only seeds resample.
      confidence: the interval's level, in (0, 1).
      num_resamples: bootstrap replicates.
      seed: the resampling's random seed (the same inputs give the same interval).

    Returns:
      `Interval(mean, low, high, confidence)`; with one seed and one question the interval is
      the point itself.

    Raises:
      ValueError: values that are not a non-empty 2-D table, or a confidence outside (0, 1).
    """
    values_sq = np.asarray(values_sq, np.float64)
    if values_sq.ndim != 2 or values_sq.size == 0:
        raise ValueError(
            f"seeds_questions_interval: values must be a non-empty [seeds, questions] table, "
            f"got shape {values_sq.shape}."
        )
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"seeds_questions_interval: confidence={confidence} must lie in (0, 1).")
    num_seeds, num_questions = values_sq.shape
    rng = np.random.default_rng(seed)
    seeds_bs = rng.integers(0, num_seeds, size=(num_resamples, num_seeds))
    questions_bq = rng.integers(0, num_questions, size=(num_resamples, num_questions))
    replicates_b = _crossed_means(values_sq, seeds_bs, questions_bq)
    return percentile_interval(float(values_sq.mean()), replicates_b, confidence)


def _crossed_means(values_sq: np.ndarray, seeds_bs: np.ndarray, questions_bq: np.ndarray):
    """[B] the mean of each replicate: its drawn seeds crossed with its drawn questions
    ([B, S, Q] by advanced indexing)."""
    return values_sq[seeds_bs[:, :, None], questions_bq[:, None, :]].mean(axis=(1, 2))


def percentile_interval(mean: float, replicates_b: np.ndarray, confidence: float) -> Interval:
    """`Interval(mean, ...)` whose ends are the (1 - confidence) / 2 and (1 + confidence) / 2
    percentiles of the bootstrap replicates [B] (the percentile bootstrap of the module
    docstring); every interval here is made by it."""
    tail = 100 * (1.0 - confidence) / 2
    low, high = np.percentile(replicates_b, [tail, 100 - tail])
    return Interval(mean, float(low), float(high), confidence)


def difference_interval(
    values_sq: np.ndarray,
    baseline_rq: np.ndarray,
    *,
    confidence: float = 0.95,
    num_resamples: int = 4000,
    seed: int = 0,
) -> Interval:
    """mean(values) - mean(baseline) of two groups scored on the same questions, with a
    bootstrap interval: the questions are resampled once for both (paired), each group's seeds
    on their own (two algorithms' seeds are independent runs, not pairs).

    Args:
      values_sq: [S, Q] per seed and question of one group, e.g. 0/1 correctness after training.
      baseline_rq: [R, Q] the same of the group compared against, on the same Q questions.
      confidence, num_resamples, seed: as `seeds_questions_interval`.

    Raises:
      ValueError: tables that are not 2-D, or that score different numbers of questions.

    Example:
      >>> difference_interval(np.ones((3, 4)), np.zeros((3, 4))).mean
      1.0
    """
    values_sq = np.asarray(values_sq, np.float64)
    baseline_rq = np.asarray(baseline_rq, np.float64)
    if values_sq.ndim != 2 or baseline_rq.ndim != 2 or values_sq.shape[1] != baseline_rq.shape[1]:
        raise ValueError(
            "difference_interval: both tables must be [seeds, questions] over the same "
            f"questions, got shapes {values_sq.shape} and {baseline_rq.shape}."
        )
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"difference_interval: confidence={confidence} must lie in (0, 1).")
    rng = np.random.default_rng(seed)
    questions_bq = rng.integers(0, values_sq.shape[1], size=(num_resamples, values_sq.shape[1]))

    def replicates(table):
        seeds_bs = rng.integers(0, table.shape[0], size=(num_resamples, table.shape[0]))
        return _crossed_means(table, seeds_bs, questions_bq)

    diffs_b = replicates(values_sq) - replicates(baseline_rq)
    mean = float(values_sq.mean() - baseline_rq.mean())
    return percentile_interval(mean, diffs_b, confidence)


def clustered_difference_interval(
    hits_a_c: np.ndarray,
    hits_b_c: np.ndarray,
    counts_c: np.ndarray,
    *,
    confidence: float = 0.95,
    num_resamples: int = 4000,
    seed: int = 0,
) -> Interval:
    """(sum a - sum b) / sum counts: two predictors' accuracy difference over items that come in
    clusters (a completion's steps, a prompt's completions), with a bootstrap interval that
    resamples whole clusters, so that items of one cluster, which are not independent, move
    together (the cluster bootstrap: Davison & Hinkley, "Bootstrap Methods and their
    Application", 1997, section 3.8). Both predictors are scored on the same items, so the
    difference is paired within each drawn cluster.

    Args:
      hits_a_c, hits_b_c: [C] items each predictor got right in each cluster.
      counts_c: [C] items in each cluster (> 0 in total).
      confidence, num_resamples, seed: as `seeds_questions_interval`.

    Raises:
      ValueError: arrays of other shapes or no item at all.

    Example:
      >>> clustered_difference_interval(np.array([2, 3]), np.array([1, 1]), np.array([3, 3])).mean
      0.5
    """
    a, b, n = (np.asarray(x, np.float64) for x in (hits_a_c, hits_b_c, counts_c))
    if not (a.ndim == 1 and a.shape == b.shape == n.shape) or n.sum() <= 0:
        raise ValueError(
            "clustered_difference_interval: hits and counts must be [clusters] arrays of one "
            f"length with items in them, got shapes {a.shape}, {b.shape}, {n.shape}."
        )
    if not 0.0 < confidence < 1.0:
        raise ValueError(
            f"clustered_difference_interval: confidence={confidence} must lie in (0, 1)."
        )
    rng = np.random.default_rng(seed)
    clusters_bc = rng.integers(0, len(n), size=(num_resamples, len(n)))
    drawn = n[clusters_bc].sum(1)
    diffs_b = (a[clusters_bc].sum(1) - b[clusters_bc].sum(1)) / np.maximum(drawn, 1.0)
    return percentile_interval(float((a.sum() - b.sum()) / n.sum()), diffs_b, confidence)
