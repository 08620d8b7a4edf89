"""Tests of held-out kappa (jaxrl_llm.evals.agreement) on hand-made evaluations."""

import numpy as np
import pytest

from jaxrl_llm.evals.agreement import kappa, kappa_intervals
from jaxrl_llm.evals.hacks import EvalAnswers


def _eval(answers, references):
    correct = np.asarray([a == r for a, r in zip(answers, references, strict=True)], np.int8)
    return EvalAnswers(answers, correct, np.zeros(len(answers), np.int8), references)


def test_kappa_by_hand():
    # p_o = 3/4; P(answer): 3 -> 2/4, 5 -> 1/4, none -> 1/4; P(reference): 3 -> 2/4, 5 -> 1/4,
    # 7 -> 1/4; p_e = 1/2 * 1/2 + 1/4 * 1/4 = 5/16; kappa = (3/4 - 5/16) / (11/16) = 7/11.
    answers, references = ["3", "3", "5", None], ["3", "3", "5", "7"]
    assert kappa(answers, references, [1, 1, 1, 0]) == pytest.approx(7 / 11)
    # the same answers shuffled against the questions: right once, below chance
    assert kappa(["3", "5", "3", None], references, [1, 0, 0, 0]) == pytest.approx(-1 / 11)


def test_a_constant_has_no_agreement_beyond_chance_and_a_perfect_policy_has_one():
    references = ["1"] * 68 + ["2"] * 23 + ["3"] * 9  # letter_counting's shape
    constant = ["1"] * 100
    assert kappa(constant, references, [r == "1" for r in references]) == pytest.approx(0.0)
    assert kappa(references, references, [1] * 100) == pytest.approx(1.0)
    # every answer one value and every reference the same: p_e = 1, reported as 0
    assert kappa(["4", "4"], ["4", "4"], [1, 1]) == 0.0


def test_answers_compare_by_value_and_no_answer_matches_nothing():
    # "2.0" is the reference "2"; None never counts toward p_e
    assert kappa(["2.0", "5"], ["2", "5"], [1, 1]) == pytest.approx(1.0)
    # p_o = 1/2, P(answer = 2) = 1/2, P(reference = 2) = 1/2: p_e = 1/4, kappa = 1/3
    assert kappa(["2", None], ["2", "5"], [1, 0]) == pytest.approx(1 / 3)


def test_kappa_intervals_gain_is_paired_and_contains_the_point():
    references = [str(i % 5) for i in range(40)]
    blind = [_eval(["0"] * 40, references) for _ in range(3)]  # a constant, kappa 0
    right = [_eval(list(references), references) for _ in range(3)]  # all right, kappa 1
    result = kappa_intervals(blind, right, num_resamples=500)
    assert result.before.mean == pytest.approx(0.0)
    assert result.after.mean == pytest.approx(1.0)
    assert result.gain.mean == pytest.approx(1.0)
    # a constant stays at 0 and a perfect policy at 1 on every draw: the intervals are points
    assert (result.gain.low, result.gain.high) == pytest.approx((1.0, 1.0))
    half = [_eval(references[:20] + ["9"] * 20, references) for _ in range(3)]
    mixed = kappa_intervals(blind, half, num_resamples=500)
    assert mixed.gain.low < mixed.gain.mean < mixed.gain.high
    assert mixed.gain.mean == pytest.approx(kappa(half[0].answers, references, half[0].correct))


def test_kappa_intervals_refuse_bad_input_by_name():
    references = ["1", "2"]
    ok = _eval(["1", "2"], references)
    with pytest.raises(ValueError, match="one first and one last evaluation per seed"):
        kappa_intervals([ok], [ok, ok])
    with pytest.raises(ValueError, match="kept no references"):
        kappa_intervals([ok._replace(references=None)], [ok])
    with pytest.raises(ValueError, match="references differ"):
        kappa_intervals([ok], [_eval(["1", "2"], ["2", "1"])])
    with pytest.raises(ValueError, match="one length"):
        kappa(["1"], ["1", "2"], [1, 0])
