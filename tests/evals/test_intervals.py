"""The bootstrap interval over seeds and questions, on hand-made tables."""

import numpy as np
import pytest

from jaxrl_llm.evals.intervals import (
    Interval,
    clustered_difference_interval,
    seeds_questions_interval,
)


def test_mean_is_exact_and_interval_contains_it():
    correct = np.array([[1, 0, 1, 1], [1, 1, 0, 1]])
    interval = seeds_questions_interval(correct)
    assert interval.mean == 0.75
    assert 0.0 <= interval.low <= 0.75 <= interval.high <= 1.0


def test_constant_table_has_zero_width():
    assert seeds_questions_interval(np.ones((3, 50))) == Interval(1.0, 1.0, 1.0, 0.95)
    assert seeds_questions_interval(np.array([[0.4]])) == Interval(0.4, 0.4, 0.4, 0.95)


def test_questions_alone_give_the_binomial_width():
    # one seed, 400 questions at 30%: the normal approximation's 95% half-width is 4.5 points
    rng = np.random.default_rng(0)
    correct = (rng.random((1, 400)) < 0.3).astype(float)
    interval = seeds_questions_interval(correct)
    p = correct.mean()
    half = 1.96 * np.sqrt(p * (1 - p) / 400)
    assert interval.high - interval.low == pytest.approx(2 * half, rel=0.15)


def test_seed_spread_widens_the_interval():
    # same questions, seeds that disagree: wider than seeds that agree
    agree = np.tile((np.arange(200) % 3 == 0).astype(float), (3, 1))
    disagree = np.stack([(np.arange(200) % k == 0).astype(float) for k in (2, 3, 10)])
    narrow = seeds_questions_interval(agree)
    wide = seeds_questions_interval(disagree)
    assert wide.high - wide.low > 2 * (narrow.high - narrow.low)


def test_gain_interval_excludes_zero_only_when_it_should():
    before = np.zeros((3, 200))
    after = np.zeros((3, 200))
    after[:, :60] = 1.0  # +30 points on every seed
    gain = seeds_questions_interval(after - before)
    assert gain.mean == pytest.approx(0.3) and gain.excludes_zero()
    noisy = np.zeros((3, 200))
    noisy[0, :20], noisy[1, 20:30] = 1.0, -1.0  # +10, -5, 0 points
    assert not seeds_questions_interval(noisy).excludes_zero()


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="shape"):
        seeds_questions_interval(np.zeros(3))
    with pytest.raises(ValueError, match="confidence"):
        seeds_questions_interval(np.zeros((2, 2)), confidence=1.0)


def test_clustered_difference_by_hand():
    # cluster 0: 3 items, a right on 3, b on 1; cluster 1: 1 item, a and b both right
    a, b, n = np.array([3, 1]), np.array([1, 1]), np.array([3, 1])
    interval = clustered_difference_interval(a, b, n, num_resamples=2000)
    assert interval.mean == pytest.approx(2 / 4)
    # replicates draw the clusters {0,0}: 2/3, {0,1}: 2/4, {1,1}: 0
    assert interval.low == pytest.approx(0.0) and interval.high == pytest.approx(2 / 3)
    assert not interval.excludes_zero()


def test_clustered_difference_moves_a_clusters_items_together():
    # every cluster the same difference (a one item ahead of b in 4): zero width, wherever
    # the items lie; one cluster holding the whole lead widens it
    same = clustered_difference_interval(np.full(10, 3), np.full(10, 2), np.full(10, 4))
    assert same.low == same.high == pytest.approx(0.25)
    lumped = clustered_difference_interval(np.r_[12, np.full(9, 2)], np.full(10, 2), np.full(10, 4))
    assert lumped.mean == pytest.approx(0.25) and lumped.low == pytest.approx(0.0)


def test_clustered_difference_refuses_bad_input():
    with pytest.raises(ValueError, match="one length"):
        clustered_difference_interval(np.ones(2), np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="items in them"):
        clustered_difference_interval(np.zeros(2), np.zeros(2), np.zeros(2))


def _width(interval: Interval) -> float:
    return interval.high - interval.low


def _wrong_bootstrap_width(values_sq, *, questions_per_seed: bool, num_resamples=4000, seed=0):
    """The width a wrong bootstrap gives: questions drawn anew for each seed (or seeds drawn
    anew for each question), which treats the table's cells as more independent than they are."""
    rng = np.random.default_rng(seed)
    s, q = values_sq.shape
    seeds_bs = rng.integers(0, s, size=(num_resamples, s))
    if questions_per_seed:
        questions_bsq = rng.integers(0, q, size=(num_resamples, s, q))
        means = values_sq[seeds_bs[:, :, None], questions_bsq].mean(axis=(1, 2))
    else:
        seeds_bqs = rng.integers(0, s, size=(num_resamples, q, s))
        means = values_sq[seeds_bqs, np.arange(q)[None, :, None]].mean(axis=(1, 2))
    low, high = np.percentile(means, [2.5, 97.5])
    return high - low


def test_questions_are_drawn_once_for_every_seed():
    """Every seed answers the same held-out questions, so a question's difficulty is shared:
    with 4 seeds that agree on each of 100 questions, the interval is as wide as 100 questions
    alone give. Drawing the questions anew for each seed would halve it (sqrt of 4 seeds)."""
    rng = np.random.default_rng(1)
    per_question = (rng.random(100) < 0.5).astype(float)
    table = np.tile(per_question, (4, 1))
    p = per_question.mean()
    expected = 2 * 1.96 * np.sqrt(p * (1 - p) / 100)
    assert _width(seeds_questions_interval(table)) == pytest.approx(expected, rel=0.15)
    wrong = _wrong_bootstrap_width(table, questions_per_seed=True)
    assert wrong == pytest.approx(expected / 2, rel=0.2)  # the test tells the two apart


def test_seeds_are_drawn_once_for_every_question():
    """A seed's effect is shared by all its questions: 4 seeds at 20/40/60/80% on every
    question give the interval of 4 draws of those 4 values (enumerated exactly here).
    Drawing seeds anew for each of 100 questions would shrink it about tenfold."""
    accuracy_s = np.array([0.2, 0.4, 0.6, 0.8])
    table = np.tile(accuracy_s[:, None], (1, 100))
    draws = np.stack(np.meshgrid(*[accuracy_s] * 4, indexing="ij"), -1).reshape(-1, 4)
    expected = np.subtract(*np.percentile(draws.mean(1), [97.5, 2.5]))
    assert _width(seeds_questions_interval(table)) == pytest.approx(expected, rel=0.1)
    assert _wrong_bootstrap_width(table, questions_per_seed=False) < expected / 5
