"""The constraint pieces on hand-made arrays: Lagrangian shaping and dual ascent, CGPO's
calibration and CRPG / CRRAFT / CODPO selections, and the per-class length budgets."""

import numpy as np
import pytest

from jaxrl_llm.algorithms.online_dpo import best_worst_rows
from jaxrl_llm.constraints import (
    budget_metrics,
    calibrated_rewards,
    codpo_scores,
    constraint_values,
    crpg_rewards,
    crraft_advantages,
    dual_ascent,
    lagrangian_rewards,
    length_costs,
    parse_budgets,
)

NAN = np.nan


def test_lagrangian_rewards_subtract_weighted_costs_and_ignore_missing_verdicts():
    rewards = np.array([1.0, 0.0, 1.0])
    costs = np.array([[1.0, 0.0, NAN], [2.0, 4.0, 1.0]])
    shaped = lagrangian_rewards(rewards, costs, np.array([0.5, 0.25]))
    np.testing.assert_allclose(shaped, [1.0 - 0.5 - 0.5, 0.0 - 1.0, 1.0 - 0.25])
    np.testing.assert_allclose(lagrangian_rewards(rewards, costs, np.zeros(2)), rewards)
    with pytest.raises(ValueError, match=r"\[K, B\]"):
        lagrangian_rewards(rewards, costs, np.zeros(3))


def test_constraint_values_average_over_verdicts():
    costs = np.array([[1.0, 0.0, NAN, 1.0], [NAN, NAN, NAN, NAN]])
    np.testing.assert_allclose(constraint_values(costs), [2 / 3, 0.0])


def test_dual_ascent_grows_while_violated_decays_and_clips():
    lam = np.array([0.0, 1.0, 9.0])
    new = dual_ascent(
        lam,
        np.array([0.3, 0.0, 1.0]),
        np.array([0.1, 0.5, 0.0]),
        learning_rate=2.0,
        max_multiplier=10.0,
    )
    # 0 + 2 * 0.2 = 0.4; 1 + 2 * (-0.5) = 0 (clipped at 0 from 0.0); 9 + 2 * 1 = 11 -> 10
    np.testing.assert_allclose(new, [0.4, 0.0, 10.0], rtol=1e-6)
    assert dual_ascent(np.array([0.1]), np.array([0.0]), np.array([0.5]), learning_rate=1.0) == 0
    with pytest.raises(ValueError, match="learning_rate"):
        dual_ascent(lam, lam, lam, learning_rate=0.0)


def test_calibrated_rewards_against_group_mean_or_baseline():
    rewards = np.array([1.0, 0.0, 0.0, 0.0])
    sig = lambda x: 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(
        calibrated_rewards(rewards, 2), [sig(0.5), sig(-0.5), 0.5, 0.5], rtol=1e-6
    )
    baseline = np.array([1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(
        calibrated_rewards(rewards, 2, baseline), [0.5, sig(-1.0), 0.5, 0.5], rtol=1e-6
    )


def test_crpg_gives_violating_generations_nothing():
    rewards = np.array([1.0, 0.0, 1.0, 1.0])
    violated = np.array([False, False, True, False])
    out = crpg_rewards(rewards, violated, 2)
    assert out[2] == 0.0 and out[3] == pytest.approx(0.5)
    assert out[0] > 0.5 > out[1] > 0.0  # non-violating rewards stay positive and ordered


def test_crraft_imitates_the_best_feasible_generation():
    rewards = np.array([0.9, 0.5, 0.5, 1.0, 0.3, 0.2])
    violated = np.array([True, False, False, True, True, True])
    # group 1: the 0.9 one violates -> the first 0.5 (row 1); group 2: all violate -> none
    np.testing.assert_array_equal(crraft_advantages(rewards, violated, 3), [0, 1, 0, 0, 0, 0])


def test_codpo_pairs_best_feasible_against_worst_violating():
    rewards = np.array([0.9, 0.5, 0.1, 1.0, 0.2, 0.7, 0.3, 0.8, 0.6])
    violated = np.array([True, False, False, False, False, False, True, True, True])
    rows, weights = best_worst_rows(codpo_scores(rewards, violated, 3), 3)
    # group 1: chosen row 1 (best feasible), rejected row 0 (the violating one, not row 2)
    # group 2: nothing violates -> best 3, worst 4; group 3: all violate -> no pair
    np.testing.assert_array_equal(rows[:4], [1, 0, 3, 4])
    np.testing.assert_array_equal(weights, [1.0, 1.0, 0.0])


def test_budgets_parse_cost_and_report():
    assert parse_budgets("chain_sum:12, gcd:24") == {"chain_sum": 12, "gcd": 24}
    for bad in ("chain_sum", "chain_sum:0", "chain_sum:x", ":3"):
        with pytest.raises(ValueError, match="config.constraints.budgets"):
            parse_budgets(bad)
    lengths = np.array([6, 24, 12, 30])
    classes = ["chain_sum", "chain_sum", "gcd", "other"]
    costs = length_costs(lengths, classes, {"chain_sum": 12, "gcd": 24})
    # only the excess over the budget costs: (24 / 12 - 1) = 1 for the over-long chain_sum row
    np.testing.assert_allclose(costs, [[0.0, 1.0, NAN, NAN], [NAN, NAN, 0.0, NAN]])
    metrics = budget_metrics(lengths, classes, {"chain_sum": 12, "gcd": 24})
    assert metrics["budget/chain_sum/mean_length"] == 15.0
    assert metrics["budget/chain_sum/over_budget"] == 0.5
    assert metrics["budget/gcd/over_budget"] == 0.0
