"""Held-out accuracy beyond chance: Cohen's kappa between a policy's answers and the references.

A policy that ignores the question still scores: a constant answer is right wherever it is the
reference, so on letter_counting (the reference is "1" for 68% of the held-out questions) a run
that answers "1" everywhere ends 36 points above a base model that does not, having learned
nothing about any question (docs/recipe.md). The agreement expected by chance from the two answer
distributions alone is subtracted, as Cohen's kappa does for two raters:

    kappa = (p_o - p_e) / (1 - p_e),    p_e = sum_a P(answer = a) * P(reference = a)

with p_o the held-out accuracy, P(answer = a) the share of the questions the policy answered a
and P(reference = a) the share whose reference is a ("A coefficient of agreement for nominal
scales", Cohen 1960, Educational and Psychological Measurement 20(1)). A policy whose answers do
not depend on the question (a constant, or any answer distribution drawn blind) has kappa 0 in
expectation; one that is right on every question has kappa 1; on a task of many distinct answers
(chain_sum) p_e is near 0 and kappa is close to the accuracy. `jaxrl_llm.rewards.chance` applies
the same correction per sample to the training reward; this is its held-out measure.

"No answer" (None) is a category of its own, never any reference. Answers and references are
compared by `hacks.answer_key` ("2.0" is "2").

`kappa_intervals(before, after)` gives kappa at the first and last evaluation of a group of seeds
and its gain, each with a 95% interval from the crossed seeds-by-questions bootstrap of
`jaxrl_llm.evals.intervals` (every replicate recomputes both distributions on its drawn
questions, since kappa is a ratio, not a mean of per-question values).

Example:
  >>> kappa(["1", "1", "1", "1"], ["1", "1", "1", "2"], [1, 1, 1, 0])   # a constant: no skill
  0.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxrl_llm.evals.hacks import EvalAnswers, answer_key
from jaxrl_llm.evals.intervals import Interval, percentile_interval

__all__ = ["KappaIntervals", "kappa", "kappa_intervals"]

_NO_ANSWER = "\0none"  # the code of a missing answer: no reference is ever this


def kappa(
    answers: Sequence[str | None],
    references: Sequence[str],
    correct: Sequence[int],
) -> float:
    """Cohen's kappa of one evaluation (module docstring): (p_o - p_e) / (1 - p_e).

    Args:
      answers: [Q] the policy's answer to each question (None: it stated none).
      references: [Q] each question's reference answer.
      correct: [Q] 0/1, whether each answer was scored right (p_o is their mean).

    Returns:
      kappa in [-1, 1]; 0.0 when every answer and every reference is one and the same value
      (p_e = 1: nothing beyond chance can be shown).

    Raises:
      ValueError: the three do not have one length, or are empty.

    Example:
      >>> kappa(["3", "5", None], ["3", "5", "7"], [1, 1, 0])   # p_o = 2/3, p_e = 2/9
      0.5714285714285714
    """
    table = _coded([answers], references, [correct])
    weights_bq = np.ones((1, len(references)))
    return float(_kappas(weights_bq, *table)[0, 0])


class KappaIntervals(NamedTuple):
    """Kappa over a group's seeds at its first and last evaluation and their paired difference,
    each an `Interval` (fractions: 0.31 is 31 points)."""

    before: Interval
    after: Interval
    gain: Interval


def kappa_intervals(
    before: Sequence[EvalAnswers],
    after: Sequence[EvalAnswers],
    *,
    confidence: float = 0.95,
    num_resamples: int = 4000,
    seed: int = 0,
) -> KappaIntervals:
    """Kappa before and after training over S seeds, with crossed-bootstrap intervals.

    Each replicate draws S seeds with replacement and, independently, Q questions with
    replacement shared by every drawn seed and by both evaluations (so the gain stays paired by
    seed and question, as `seeds_questions_interval` pairs accuracy gains); kappa is recomputed
    per drawn seed on the drawn questions and averaged.

    Args:
      before, after: [S] each seed's first and last evaluation, in the same seed order, all on
        one held-out set with its references kept (`EvalAnswers.references`).
      confidence: the intervals' level, in (0, 1).
      num_resamples: bootstrap replicates.
      seed: the resampling's random seed.

    Raises:
      ValueError: no seed, unequal numbers of evaluations, an evaluation without references,
        evaluations of different held-out sets (their references differ), or a confidence
        outside (0, 1).
    """
    if not before or len(before) != len(after):
        raise ValueError(
            f"kappa_intervals: needs one first and one last evaluation per seed, got "
            f"{len(before)} and {len(after)}."
        )
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"kappa_intervals: confidence={confidence} must lie in (0, 1).")
    evaluations = list(before) + list(after)
    if any(e.references is None for e in evaluations):
        raise ValueError(
            "kappa_intervals: an evaluation kept no references (eval_questions.jsonl before "
            "2026-11-27); kappa needs each question's reference answer."
        )
    references = list(evaluations[0].references)
    if any(list(e.references) != references for e in evaluations):
        raise ValueError(
            "kappa_intervals: the evaluations' references differ: compare evaluations of one "
            "held-out set."
        )
    num_seeds, num_questions = len(before), len(references)
    coded = _coded([e.answers for e in evaluations], references, [e.correct for e in evaluations])
    rng = np.random.default_rng(seed)
    seeds_bs = rng.integers(0, num_seeds, size=(num_resamples, num_seeds))
    questions_bq = rng.integers(0, num_questions, size=(num_resamples, num_questions))
    weights_bq = np.zeros((num_resamples, num_questions))
    np.add.at(weights_bq, (np.arange(num_resamples)[:, None], questions_bq), 1.0)
    kappas_be = _kappas(weights_bq, *coded)  # [B, 2S]: every evaluation on each draw
    point_e = _kappas(np.ones((1, num_questions)), *coded)[0]
    first_bs = np.take_along_axis(kappas_be[:, :num_seeds], seeds_bs, axis=1)
    last_bs = np.take_along_axis(kappas_be[:, num_seeds:], seeds_bs, axis=1)
    first, last = point_e[:num_seeds], point_e[num_seeds:]
    return KappaIntervals(
        percentile_interval(float(first.mean()), first_bs.mean(1), confidence),
        percentile_interval(float(last.mean()), last_bs.mean(1), confidence),
        percentile_interval(float((last - first).mean()), (last_bs - first_bs).mean(1), confidence),
    )


def _coded(
    answers: Sequence[Sequence[str | None]],
    references: Sequence[str],
    correct: Sequence[Sequence[int]],
) -> tuple[np.ndarray, np.ndarray]:
    """([E, Q] 0/1 correctness, [E, Q, Q] match[e, i, j] = answer e_i is reference j) of E
    evaluations (`answers[e]`, `correct[e]`) on one set of Q references."""
    num_questions = len(references)
    if num_questions == 0:
        raise ValueError("kappa: no questions.")
    if any(
        len(a) != num_questions or len(c) != num_questions
        for a, c in zip(answers, correct, strict=True)
    ):
        raise ValueError(
            f"kappa: answers, references and correct must have one length ({num_questions} "
            "references)."
        )
    reference_keys = np.asarray([answer_key(r) or _NO_ANSWER for r in references], object)
    match_eqq = np.stack(
        [
            np.asarray([answer_key(a) or _NO_ANSWER for a in evaluation], object)[:, None]
            == reference_keys[None, :]
            for evaluation in answers
        ]
    ).astype(np.float64)
    reference_keys_none = reference_keys == _NO_ANSWER
    match_eqq[:, :, reference_keys_none] = 0.0  # "no answer" never agrees with anything
    correct_eq = np.asarray([np.asarray(c, np.float64) for c in correct])
    return correct_eq, match_eqq


def _kappas(weights_bq: np.ndarray, correct_eq: np.ndarray, match_eqq: np.ndarray) -> np.ndarray:
    """[B, E] kappa of each evaluation on each draw, a draw being question weights [Q] (how
    often each question was drawn): p_o = w.c / n, p_e = w^T M w / n^2."""
    total_b = weights_bq.sum(1, keepdims=True)
    observed_be = weights_bq @ correct_eq.T / total_b
    # p_e = sum_a P(answer=a) P(reference=a) = sum_{i,j} w_i w_j [answer_i == reference_j] / n^2,
    # one matmul [B, Q] x [Q, E*Q] then a weighted sum over j
    weighted_beq = np.tensordot(weights_bq, match_eqq, axes=([1], [1]))
    expected_be = (weighted_beq * weights_bq[:, None, :]).sum(-1) / total_b**2
    room_be = 1.0 - expected_be
    safe = room_be > 1e-12
    return np.where(safe, (observed_be - expected_be) / np.where(safe, room_be, 1.0), 0.0)
