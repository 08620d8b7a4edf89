"""Online DPO and RRHF as values, and the shared preference batch and loss: rows picked from
hand-made experiences, losses equal to the pure functions on the model's own log-probs."""

import types

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm import losses
from jaxrl_llm.algorithms import Experience, GoldReferences, References, make
from jaxrl_llm.algorithms.online_dpo import best_worst_rows
from jaxrl_llm.config import config_for, validate_config
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.training.logprobs import sequence_logprobs
from jaxrl_llm.training.preference import (
    PairRows,
    PreferenceLossConfig,
    pair_loss,
    preference_loss,
)


def test_best_worst_rows_pick_the_extremes_and_weight_out_ties():
    rewards = np.array([0.0, 1.0, 0.5, 0.0, 1.0, 1.0, 1.0, 1.0, 0.2, 0.0, 0.9, 0.0])
    rows, weights = best_worst_rows(rewards, 4)
    # group 0: best row 1, worst row 0 (first of the ties); group 1: all tie -> rows 4, 5,
    # weight 0; group 2: best row 10, worst row 9
    np.testing.assert_array_equal(rows, [1, 0, 4, 5, 10, 9])
    np.testing.assert_array_equal(weights, [1.0, 0.0, 1.0])


def _rollout(rng, rows=8, width=10, prompt=3):
    tokens = rng.integers(1, 50, size=(rows, width)).astype(np.int32)
    lengths = rng.integers(1, width - prompt + 1, size=rows)
    mask = np.zeros((rows, width), bool)
    for b, n in enumerate(lengths):
        mask[b, prompt : prompt + n] = True
    return types.SimpleNamespace(
        tokens=tokens,
        completion_mask=mask,
        logprobs=np.where(mask, -rng.random((rows, width)), 0.0).astype(np.float32),
    )


def test_online_dpo_batch_and_loss_are_dpo_on_the_best_and_worst_completions():
    rng = np.random.default_rng(0)
    config = config_for("online_dpo")
    config.rollout.group_size, config.loss.beta = 4, 0.5
    algorithm = make(config)
    assert set(algorithm.roles) == {"actor", "rollout", "reward", "reference"}
    rollout = _rollout(rng)
    ref = np.where(rollout.completion_mask, -rng.random((8, 10)), 0.0).astype(np.float32)
    rewards = np.array([0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], np.float32)
    batch, scalars = algorithm.make_batch(Experience(rollout, rewards, 4, ref_logp=ref), ())
    np.testing.assert_array_equal(batch.tokens, rollout.tokens[[1, 0, 4, 5]])
    np.testing.assert_array_equal(batch.ref_logp, ref[[1, 0, 4, 5]])
    np.testing.assert_array_equal(batch.rollout_logp, rollout.logprobs[[1, 0, 4, 5]])
    assert scalars == {"pairs_kept": 0.5}
    model = init_model(tiny_config(vocab_size=64), seed=0)
    loss, metrics = algorithm.loss(model, batch)
    logp, _ = sequence_logprobs(model, batch.tokens, temperature=config.rollout.temperature)
    seq = np.asarray((logp * batch.loss_mask).sum(-1))
    ref_seq = (ref[[1, 0, 4, 5]] * rollout.completion_mask[[1, 0, 4, 5]]).sum(-1)
    # the tied second group carries weight 0: the loss is the first pair's alone
    expected, _ = losses.dpo(seq[:1], seq[1:2], ref_seq[:1], ref_seq[1:2], beta=0.5)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    np.testing.assert_allclose(metrics["chosen_logp"], seq[0], rtol=1e-5)


def test_reference_free_online_dpo_builds_no_reference():
    config = config_for("online_dpo")
    config.loss.loss_type = "simpo"
    assert "reference" not in make(config).roles


def test_rrhf_loss_is_the_ranking_loss_of_the_groups():
    rng = np.random.default_rng(1)
    config = config_for("rrhf")
    config.rollout.group_size = 4
    algorithm = make(config)
    assert set(algorithm.roles) == {"actor", "rollout", "reward"}
    rollout = _rollout(rng)
    rewards = rng.random(8).astype(np.float32)
    batch, _ = algorithm.make_batch(Experience(rollout, rewards, 4), ())
    model = init_model(tiny_config(vocab_size=64), seed=0)
    loss, metrics = algorithm.loss(model, batch)
    logp, _ = sequence_logprobs(model, batch.tokens)
    expected, _ = losses.rrhf(
        logp.reshape(2, 4, 10),
        batch.loss_mask.reshape(2, 4, 10),
        jnp.asarray(rewards).reshape(2, 4),
    )
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    assert float(metrics["rank_loss"]) > 0


def test_rrhf_with_references_ranks_each_group_with_its_gold_answer():
    rng = np.random.default_rng(3)
    config = config_for("rrhf")
    config.rollout.group_size, config.loss.reference_template = 4, "The answer is {answer}."
    algorithm = make(config)
    assert algorithm.collects == (GoldReferences("The answer is {answer}."),)
    rollout = _rollout(rng)
    refs = References(
        tokens=np.full((2, 10), 7, np.int32),
        completion_mask=np.tile(np.arange(10) >= 3, (2, 1)),
        rewards=np.array([1.0, 1.0], np.float32),
    )
    rewards = np.zeros(8, np.float32)
    batch, scalars = algorithm.make_batch(Experience(rollout, rewards, 4, references=refs), ())
    # groups of 5: four samples, then the reference
    np.testing.assert_array_equal(batch.tokens[:4], rollout.tokens[:4])
    np.testing.assert_array_equal(np.asarray(batch.tokens)[[4, 9]], refs.tokens)
    np.testing.assert_array_equal(batch.advantages, [0, 0, 0, 0, 1] * 2)
    assert scalars == {"reference_reward": 1.0}
    model = init_model(tiny_config(vocab_size=64), seed=0)
    loss, metrics = algorithm.loss(model, batch)
    logp, _ = sequence_logprobs(model, batch.tokens)
    expected, _ = losses.rrhf(
        logp.reshape(2, 5, 10),
        batch.loss_mask.reshape(2, 5, 10),
        batch.advantages.reshape(2, 5),
        ft_on_ties=False,
    )
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    assert float(metrics["ft_groups"]) == 1.0  # the reference is every group's best


@pytest.mark.parametrize(
    "name, overrides, field",
    [
        ("online_dpo", {"rollout.group_size": 1}, "group_size"),
        (
            "online_dpo",
            {"train.num_minibatches": 3, "rollout.num_prompts": 4, "rollout.group_size": 3},
            "num_minibatches",
        ),  # fmt: skip
        ("online_dpo", {"train.pack_sequences": True}, "pack_sequences"),
        ("online_dpo", {"off_policy.correction": "tis"}, "off_policy.correction"),
        ("online_dpo", {"loss.loss_type": "dpo"}, "loss.loss_type"),
        ("online_dpo", {"loss.loss_type": "ipo", "loss.label_smoothing": 0.1}, "label_smoothing"),
        ("rrhf", {"loss.rank_weight": -1.0}, "loss.rank_weight"),
        ("rrhf", {"rollout.group_size": 1}, "group_size"),
        ("rrhf", {"loss.reference_template": "gold"}, "loss.reference_template"),
    ],
)
def test_bad_preference_algorithm_config_names_the_field(name, overrides, field):
    config = config_for(name)
    for key, value in overrides.items():
        section, leaf = key.split(".")
        config[section][leaf] = value
    with pytest.raises(ValueError, match=field):
        validate_config(config)


# Two pairs: summed policy log-probs, lengths and reference log-probs (rows chosen, rejected).
LOGP = jnp.array([-2.0, -6.0, -3.0, -1.0])
TOKENS = jnp.array([2.0, 3.0, 3.0, 1.0])
REF = jnp.array([-3.0, -5.0, -3.0, -2.0])
WEIGHTS = jnp.array([1.0, 1.0])


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge", "kto", "simpo", "orpo"])
def test_pair_loss_is_the_pure_function_on_interleaved_rows(loss_type):
    config = PreferenceLossConfig(loss_type=loss_type, beta=0.5)
    got, metrics = pair_loss(LOGP, TOKENS, REF, WEIGHTS, config=config)
    pc, pr, nc, nr, rc, rr = (
        LOGP[0::2],
        LOGP[1::2],
        TOKENS[0::2],
        TOKENS[1::2],
        REF[0::2],
        REF[1::2],
    )
    if loss_type in ("sigmoid", "hinge"):
        want, _ = losses.dpo(pc, pr, rc, rr, beta=0.5, loss_type=loss_type)
    elif loss_type == "ipo":
        want, _ = losses.dpo(pc / nc, pr / nr, rc / nc, rr / nr, beta=0.5, loss_type="ipo")
    elif loss_type == "kto":
        want, _ = losses.kto(LOGP, REF, jnp.array([True, False, True, False]), beta=0.5)
    elif loss_type == "simpo":
        want, _ = losses.simpo(pc, pr, nc, nr, beta=0.5)
    else:
        want, _ = losses.orpo(pc, pr, nc, nr, lam=0.5)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(metrics["chosen_logp"], (-2.0 - 3.0) / 2)
    assert "reward_accuracy" in metrics


def test_preference_loss_reads_only_the_completion_tokens():
    model = init_model(tiny_config(vocab_size=64), seed=0)
    rng = np.random.default_rng(2)
    tokens = jnp.asarray(rng.integers(1, 64, size=(4, 8)), jnp.int32)
    mask = jnp.zeros((4, 8)).at[:, 3:6].set(1.0)
    rows = PairRows(tokens, mask, jnp.zeros(4), jnp.ones(2))
    config = PreferenceLossConfig(loss_type="simpo")
    loss, _ = preference_loss(model, rows, config=config)
    # changing a token after the completion (padding) leaves the loss as it was
    changed = rows._replace(tokens=tokens.at[:, 7].set(5))
    np.testing.assert_allclose(preference_loss(model, changed, config=config)[0], loss, rtol=1e-6)
