"""pass@k and maj@k against values computed by hand."""

import math

import pytest

from jaxrl_llm.evals import estimators, maj_at_k, majority_answer, pass_at_k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (4, 1, 1, 1 / 4),
        (4, 1, 2, 1 - 3 / 6),  # 1 - C(3,2)/C(4,2)
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 3, 4, 1 - 35 / 210),  # 1 - C(7,4)/C(10,4)
        (8, 0, 4, 0.0),
        (4, 3, 2, 1.0),  # fewer than k wrong samples: always a correct one
        (3, 3, 3, 1.0),
    ],
)
def test_pass_at_k_matches_the_binomial_ratio(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_1_is_the_fraction_correct_and_pass_at_k_grows_with_k():
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16)
    values = [pass_at_k(16, 5, k) for k in range(1, 17)]
    assert values == sorted(values) and values[-1] == 1.0


@pytest.mark.parametrize("n, c, k", [(4, 1, 0), (4, 1, 5), (4, 5, 2), (4, -1, 2)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_majority_answer_breaks_ties_by_first_appearance_and_ignores_none():
    assert majority_answer(["3", "4", "4", "3"]) == 0
    assert majority_answer(["4", "3", "3"]) == 1
    assert majority_answer([None, "5", None, None]) == 1
    assert majority_answer([None, None]) is None


def test_maj_at_k_by_hand():
    answers, correct = ["7", "5", "5"], [True, False, False]
    assert maj_at_k(answers, correct, 3) == 0.0  # 5 wins
    # k=2 subsets: {7,5} tie -> 7 (first) right, {7,5} right, {5,5} wrong
    assert maj_at_k(answers, correct, 2) == pytest.approx(2 / 3)
    assert maj_at_k(answers, correct, 1) == pytest.approx(1 / 3)  # maj@1 = fraction correct
    # Four samples, two right "12", one "13", one with no answer; k=3 subsets (4 of them):
    # {12,12,13} right, {12,12,None} right, {12,13,None} tie -> 12 right, {12,13,None} right.
    answers = ["12", "12", "13", None]
    assert maj_at_k(answers, [True, True, False, False], 3) == 1.0
    # Order matters for ties: "13" first in every mixed pair.
    answers = ["13", "12", "12", None]
    # k=2: {13,12} x2 -> 13 wrong, {13,None} wrong, {12,12} right, {12,None} x2 right
    assert maj_at_k(answers, [False, True, True, False], 2) == pytest.approx(3 / 6)
    assert maj_at_k([None, None], [False, False], 1) == 0.0


def test_maj_at_k_samples_subsets_when_there_are_too_many(monkeypatch):
    monkeypatch.setattr(estimators, "MAJ_EXACT_SUBSETS", 50)
    answers = ["1"] * 10 + ["2"] * 10
    correct = [True] * 10 + [False] * 10
    value = maj_at_k(answers, correct, 5, seed=3)  # C(20, 5) = 15504 > 50: 50 random subsets
    assert value == maj_at_k(answers, correct, 5, seed=3)  # deterministic from the seed
    assert 0.2 < value < 0.8  # symmetric answers: near one half
    with pytest.raises(ValueError, match="maj_at_k"):
        maj_at_k(answers, correct[:-1], 5)
