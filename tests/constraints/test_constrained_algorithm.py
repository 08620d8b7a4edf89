"""`constrain` on hand-made experiences: the Lagrangian mode shapes GRPO's rewards by the
multipliers and raises them by dual ascent; CRPG / CRRAFT / CODPO filter by the judges; config
errors name the field; and a constrained run resumes with its multipliers."""

import types

import numpy as np
import pytest

from jaxrl_llm.algorithms import Experience, make
from jaxrl_llm.algorithms.grpo import group_advantages
from jaxrl_llm.config import config_for, validate_config
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import TIME_KEYS, train
from jaxrl_llm.stages import load_config

# Four rows (two groups of two): prompt at 0-1, completion at 2-3.
TOKENS = np.array([[5, 6, 7, 8], [5, 6, 9, 0], [5, 6, 7, 0], [5, 6, 8, 9]], np.int32)
MASK = np.array([[0, 0, 1, 1], [0, 0, 1, 0], [0, 0, 1, 0], [0, 0, 1, 1]], bool)


def _experience(rewards, violations=None, lengths=(2, 1, 1, 2), sources=None):
    rollout = types.SimpleNamespace(
        tokens=TOKENS,
        completion_mask=MASK,
        logprobs=np.zeros(TOKENS.shape, np.float32),
        lengths=np.asarray(lengths, np.int32),
        finish_reason=np.ones(4, np.int32),
    )
    return Experience(
        rollout,
        np.asarray(rewards, np.float32),
        2,
        violations=None if violations is None else np.asarray(violations, np.float32),
        sources=sources or ("chain_sum",) * 4,
    )


def _config(algorithm="grpo", **constraints):
    config = config_for(algorithm)
    config.constraints.update(constraints)
    validate_config(config)
    return config


def _advantages(batch):
    return np.asarray(batch.advantages)  # [B]: one advantage per sequence


def test_lagrangian_shapes_rewards_and_dual_ascent_raises_the_multiplier():
    config = _config(mode="lagrangian", judges="length:3", bounds="0.25", dual_lr=1.0)
    algorithm = make(config)
    state = algorithm.init()
    np.testing.assert_array_equal(state["multipliers"], [0.0])
    experience = _experience([1.0, 0.0, 1.0, 0.0], violations=[[1.0, 0.0, 0.0, np.nan]])
    batch, scalars = algorithm.make_batch(experience, state)
    np.testing.assert_allclose(_advantages(batch), group_advantages([1, 0, 1, 0], 2), atol=1e-6)
    assert scalars["constraint/length/value"] == pytest.approx(1 / 3)  # NaN: no verdict
    state = algorithm.update(state, scalars)
    np.testing.assert_allclose(state["multipliers"], [1 / 3 - 0.25], rtol=1e-5)
    state = {**state, "multipliers": np.array([2.0], np.float32)}
    batch, _ = algorithm.make_batch(experience, state)
    # row 0 pays 2.0 for its violation: 1 - 2 = -1 < 0, so it now loses to row 1
    np.testing.assert_allclose(_advantages(batch), group_advantages([-1.0, 0, 1, 0], 2), atol=1e-6)


def test_budget_multiplier_per_prompt_class():
    config = _config(mode="lagrangian", budgets="chain_sum:1,gcd:4", dual_lr=0.5)
    algorithm = make(config)
    experience = _experience(
        [1.0, 1.0, 1.0, 1.0], lengths=(2, 1, 1, 2), sources=("chain_sum",) * 2 + ("gcd",) * 2
    )
    state = algorithm.init()
    _, scalars = algorithm.make_batch(experience, state)
    # mean excess (n / B - 1)+: chain_sum (1 + 0) / 2; gcd lengths 1 and 2 are within 4
    assert scalars["constraint/length/chain_sum/value"] == pytest.approx(0.5)
    assert scalars["constraint/length/gcd/value"] == pytest.approx(0.0)
    assert scalars["budget/chain_sum/mean_length"] == 1.5
    assert scalars["budget/chain_sum/over_budget"] == 0.5
    state = algorithm.update(state, scalars)
    np.testing.assert_allclose(state["multipliers"], [0.25, 0.0])  # over budget; within
    batch, _ = algorithm.make_batch(experience, state)
    # chain_sum: 1 - 0.25 * 1 = 0.75 (one token over) against 1 (within): the shorter one wins
    assert _advantages(batch)[1] > 0 > _advantages(batch)[0]


def test_crpg_crraft_and_codpo_filter_by_the_judges():
    violations = [[1.0, 0.0, 0.0, 0.0]]
    exp = _experience([1.0, 0.0, 1.0, 0.0], violations=violations)
    crpg = make(_config(mode="crpg", judges="length:3"))
    batch, scalars = crpg.make_batch(exp, crpg.init())
    assert scalars["constraint/violated"] == 0.25
    # group 1: the correct answer violates -> reward 0 against sigmoid(-0.5) > 0: it loses
    assert _advantages(batch)[0] < 0 < _advantages(batch)[1]
    crraft = make(_config(mode="crraft", judges="length:3"))
    batch, _ = crraft.make_batch(exp, crraft.init())
    np.testing.assert_array_equal(_advantages(batch), [0.0, 1.0, 1.0, 0.0])
    codpo = make(_config("online_dpo", mode="codpo", judges="length:3"))
    batch, _ = codpo.make_batch(exp, codpo.init())
    # pairs (chosen, rejected): group 1 (row 1, row 0), group 2 (row 2, row 3)
    np.testing.assert_array_equal(np.asarray(batch.tokens)[:, 2], [9, 7, 7, 8])


def test_constraint_config_errors_name_the_field():
    cases = [
        (dict(mode="lagrange"), "config.constraints.mode"),
        (dict(mode="lagrangian", judges="length:3"), "config.constraints.bounds"),
        (dict(mode="lagrangian", judges="length:3", bounds="1.5"), "config.constraints.bounds"),
        (dict(mode="crpg"), "config.constraints.judges"),
        (dict(mode="crpg", judges="lenght:3"), "unknown judge 'lenght'"),
        (dict(mode="crpg", judges="length"), "length:<max words>"),
        (dict(mode="lagrangian", budgets="chain_sum"), "config.constraints.budgets"),
    ]
    for fields, message in cases:
        with pytest.raises(ValueError, match=message):
            _config(**fields)
    with pytest.raises(ValueError, match="codpo' wraps online_dpo"):
        make(_config(mode="codpo", judges="length:3"))


@pytest.mark.slow  # default coverage: test_lagrangian_shapes_rewards_and_dual_ascent_raises_the_multiplier
def test_lagrangian_run_resumes_with_its_multipliers(tmp_path, text_reward):
    flags = {
        "train.checkpoint_every": 1,
        "eval.before": False,
        "eval.after": False,
        "constraints.mode": "lagrangian",
        "constraints.judges": "length:2",
        "constraints.bounds": "0.1",
        "constraints.budgets": "chain_sum:4",
    }
    tiny = "experiments/configs/grpo_tiny.py"
    train(load_config(tiny, {**flags, "train.num_steps": 3}), str(tmp_path / "a"), progress=False)
    train(load_config(tiny, {**flags, "train.num_steps": 2}), str(tmp_path / "b"), progress=False)
    train(load_config(tiny, {**flags, "train.num_steps": 3}), str(tmp_path / "b"), progress=False)
    rows = {
        d: {r["step"]: r for r in read_metrics(str(tmp_path / d)) if "train/rows" in r}
        for d in "ab"
    }
    assert rows["a"][3]["algo/constraint/length/multiplier"] > 0  # it was violated, it grew
    for key, value in rows["a"][3].items():
        if key not in TIME_KEYS:
            np.testing.assert_allclose(rows["b"][3][key], value, rtol=1e-5, err_msg=key)
