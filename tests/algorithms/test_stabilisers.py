"""Stabilisers on hand-made arrays: group signal, group selection, overlong penalty, entropy
control, the rows of chosen groups, and the loss's adaptive entropy weight."""

import math
from typing import NamedTuple

import numpy as np
import pytest

from jaxrl_llm.algorithms.stabilisers import (
    entropy_control,
    group_has_signal,
    select_groups,
    soft_overlong_penalty,
    validate_stabilisers,
)
from jaxrl_llm.config import config_for
from jaxrl_llm.rewards.runner import RewardOutput
from jaxrl_llm.rollout.types import Rollout
from jaxrl_llm.runners.collectors import Generated
from jaxrl_llm.runners.stabilisers import take_groups


def test_group_signal_exact():
    rewards = np.array([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5])
    np.testing.assert_array_equal(group_has_signal(rewards, 3), [False, True, True])


def test_select_groups_takes_signal_first_then_tops_up_with_ties():
    signals = [np.array([False, True, False]), np.array([True, False, True])]
    assert select_groups(signals, 3) == [(0, 1), (1, 0), (1, 2)]
    assert select_groups([np.array([False, False, True])], 3) == [(0, 2), (0, 0), (0, 1)]
    with pytest.raises(ValueError, match="2 groups sampled, 3 needed"):
        select_groups([np.array([True, False])], 3)


def test_soft_overlong_penalty_is_dapos_piecewise_ramp():
    lengths = np.array([1, 24, 25, 28, 31, 32])
    expected = [0.0, 0.0, -1 / 8, -4 / 8, -7 / 8, -1.0]
    np.testing.assert_allclose(
        soft_overlong_penalty(lengths, max_tokens=32, cache_tokens=8), expected, rtol=1e-6
    )


def test_entropy_control_moves_toward_the_target_within_bounds():
    control = entropy_control(initial_coef=0.01, target=0.5, rate=1.0, max_coef=0.05)
    state = control.init()
    below = control.update(state, 0.5 - math.log(2))  # entropy low: coefficient doubles
    assert below.coef == pytest.approx(0.02)
    above = control.update(state, 0.5 + math.log(4))  # entropy high: quartered
    assert above.coef == pytest.approx(0.0025)
    for _ in range(10):
        state = control.update(state, 0.0)
    assert state.coef == 0.05  # clipped at max_coef
    with pytest.raises(ValueError, match="initial_coef"):
        entropy_control(initial_coef=0.0, target=0.5, rate=1.0, max_coef=0.05)


def test_bad_stabiliser_settings_name_the_field():
    config = config_for("grpo")
    config.stabilise.entropy_target = 20.0
    config.loss.entropy_coef = 0.01
    with pytest.raises(ValueError, match=r"entropy_target=20.0 must lie in \(0, log V = 10.80\)"):
        validate_stabilisers(config, vocab_size=49152)
    config.stabilise.entropy_target = 0.5
    config.loss.entropy_coef = 0.0
    with pytest.raises(ValueError, match="entropy_coef"):
        validate_stabilisers(config)
    config.loss.entropy_coef = 0.001
    config.stabilise.entropy_min_coef = 0.005  # a floor above the start
    with pytest.raises(
        ValueError,
        match=r"loss.entropy_coef=0.001 is where .* \[entropy_min_coef=0.005, entropy_max",
    ):
        validate_stabilisers(config)
    config.stabilise.entropy_max_coef = 0.004  # bounds the wrong way round
    with pytest.raises(ValueError, match=r"entropy_min_coef=0.005 and entropy_max_coef=0.004"):
        validate_stabilisers(config)
    config.stabilise.entropy_rate = 0.0
    with pytest.raises(ValueError, match=r"config.stabilise.entropy_rate=0.0 must be > 0"):
        validate_stabilisers(config)
    config = config_for("grpo")
    config.stabilise.overlong = "soft"
    config.stabilise.overlong_cache_tokens = 40
    with pytest.raises(ValueError, match="overlong_cache_tokens=40"):
        validate_stabilisers(config)
    config.stabilise.overlong = "truncate"
    with pytest.raises(ValueError, match="overlong='truncate'"):
        validate_stabilisers(config)


class FakeReferences(NamedTuple):
    tokens: np.ndarray
    completion_mask: np.ndarray
    rewards: np.ndarray


def fake_generated(offset: int, width: int, rewards) -> Generated:
    rows = len(rewards)
    tokens = np.arange(rows * width).reshape(rows, width) + 1000 * offset
    rollout = Rollout(
        tokens=tokens,
        completion_mask=np.ones((rows, width), bool),
        logprobs=np.full((rows, width), -1.0, np.float32),
        raw_logprobs=np.full((rows, width), -1.0, np.float32),
        prompt_lengths=np.full(rows, 2),
        lengths=np.arange(rows) + 1,
        finish_reason=np.ones(rows, np.int32),
    )
    rewards = np.asarray(rewards, np.float32)
    out = RewardOutput(rewards, {"task": rewards}, {"task": offset}, {"task": 0})
    refs = FakeReferences(tokens[::2], np.ones((rows // 2, width), bool), rewards[::2])
    return Generated(
        examples=[f"p{offset}{i}" for i in range(rows // 2)],
        rollout=rollout,
        completions=[f"c{offset}{i}" for i in range(rows)],
        reward_out=out,
        baseline_rewards=None,
        work=None,
        seconds={"rollout": 1.0, "reward": 0.5},
        references=refs,
        collected={"row_ids": np.arange(rows) + 100 * offset},
    )


def test_take_groups_gathers_rows_across_rounds_of_different_widths():
    first = fake_generated(0, 4, [1, 1, 0, 1])  # groups of 2: tied, signal
    second = fake_generated(1, 6, [0, 1, 0, 0])  # signal, tied
    picked = take_groups([first, second], [(0, 1), (1, 0)], 2, pad_id=-7)
    assert picked.examples == ["p01", "p10"]
    assert picked.completions == ["c02", "c03", "c10", "c11"]
    np.testing.assert_array_equal(picked.reward_out.total, [0, 1, 0, 1])
    assert picked.rollout.tokens.shape == (4, 6)
    np.testing.assert_array_equal(picked.rollout.tokens[0], [8, 9, 10, 11, -7, -7])
    np.testing.assert_array_equal(picked.rollout.tokens[2], [1000, 1001, 1002, 1003, 1004, 1005])
    assert not picked.rollout.completion_mask[1, 4:].any()
    np.testing.assert_array_equal(picked.rollout.lengths, [3, 4, 1, 2])
    assert picked.reward_out.num_errors == {"task": 1} and picked.seconds["rollout"] == 2.0
    np.testing.assert_array_equal(picked.references.rewards, [0, 0])
    assert picked.references.tokens.shape == (2, 6)
    np.testing.assert_array_equal(picked.collected["row_ids"], [2, 3, 100, 101])


def test_adaptive_entropy_weight_equals_the_constant_one():
    import jax
    import jax.numpy as jnp

    from jaxrl_llm.algorithms.batch import PolicyBatch
    from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss
    from jaxrl_llm.models import ModelConfig, init_model

    model = init_model(
        ModelConfig(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_layers=1,
            num_heads=2,
            num_kv_heads=1,
        ),  # fmt: skip
        seed=0,
    )
    tokens = jax.random.randint(jax.random.key(0), (2, 6), 0, 32)
    mask = jnp.array([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]], jnp.float32)
    batch = PolicyBatch(tokens, mask, jnp.full((2, 6), -3.0), jnp.zeros((2, 6)), jnp.ones(2))
    fixed, _ = policy_loss(model, batch, config=PolicyLossConfig(entropy_coef=0.03))
    adaptive, _ = policy_loss(
        model, batch._replace(entropy_coef=jnp.full((2,), 0.03)), config=PolicyLossConfig()
    )
    none, _ = policy_loss(model, batch, config=PolicyLossConfig())
    assert float(adaptive) == pytest.approx(float(fixed), rel=1e-6)
    assert float(adaptive) != pytest.approx(float(none), rel=1e-3)


def test_dynamic_sampling_keeps_groups_by_correctness_not_by_a_shaped_total():
    """DAPO keeps a group when 0 < #correct < G. A chance-corrected total differs inside a group
    that is all wrong (a common wrong answer costs more than a rare one); that group is still
    resampled, and one with a right answer is taken instead."""
    from jaxrl_llm.runners.stabilisers import StepStabilisers

    config = config_for("grpo")
    with config.unlocked():
        config.rollout.num_prompts, config.rollout.group_size = 1, 2
        config.stabilise.dynamic_sampling, config.stabilise.max_sampling_rounds = True, 2

    def generated(offset, correct, total):
        g = fake_generated(offset, 4, correct)
        out = g.reward_out._replace(total=np.asarray(total, np.float32))
        return g._replace(reward_out=out)

    rounds = [
        generated(0, [0, 0], [-0.4, 0.0]),  # all wrong: spread in the total only
        generated(1, [1, 0], [1.0, -0.4]),  # one right
    ]
    stabilisers = StepStabilisers(config, pad_id=0, meta={})
    picked, scalars = stabilisers.collect(lambda r: rounds[r])
    assert scalars["stabilise/sampling_rounds"] == 2.0
    assert scalars["stabilise/first_round_signal_fraction"] == 0.0
    assert scalars["stabilise/kept_group_fraction"] == 1.0
    assert picked.examples == ["p10"]


def test_tied_groups_that_top_the_batch_up_carry_no_loss():
    """When the rounds run out, tied groups fill the batch, but with their loss mask cleared: a
    shaped total that differs inside an all-wrong group must not become a gradient."""
    from jaxrl_llm.runners.stabilisers import StepStabilisers

    config = config_for("grpo")
    with config.unlocked():
        config.rollout.num_prompts, config.rollout.group_size = 2, 2
        config.stabilise.dynamic_sampling, config.stabilise.max_sampling_rounds = True, 1
    g = fake_generated(0, 4, [0, 0, 1, 0])  # group 0 tied (all wrong), group 1 has signal
    g = g._replace(reward_out=g.reward_out._replace(total=np.float32([-0.4, 0.0, 1.0, -0.4])))
    picked, scalars = StepStabilisers(config, pad_id=0, meta={}).collect(lambda r: g)
    assert scalars["stabilise/kept_group_fraction"] == 0.5
    assert picked.examples == ["p01", "p00"]  # signal first, then the tied top-up
    mask = picked.rollout.completion_mask
    assert mask[:2].all() and not mask[2:].any()


def test_a_step_with_no_loss_tokens_leaves_the_entropy_weight_alone():
    from jaxrl_llm.runners.stabilisers import META_KEY, StepStabilisers

    config = config_for("grpo")
    with config.unlocked():
        config.stabilise.entropy_target, config.loss.entropy_coef = 1.0, 0.001
    meta = {}
    stabilisers = StepStabilisers(config, pad_id=0, meta=meta)
    assert stabilisers.observe({"train/entropy": 0.0}, trained_tokens=False) == {}
    assert meta[META_KEY] == 0.001  # every row masked: no entropy was measured
    assert stabilisers.observe({"train/entropy": 0.0})["stabilise/entropy_coef"] == 0.001
    assert meta[META_KEY] > 0.001  # a measured 0 is below the target: the weight rises


def test_the_entropy_weight_stays_at_its_floor_while_entropy_is_above_the_target():
    """`stabilise.entropy_min_coef` at the starting weight: high entropy cannot drive the weight
    toward 0, so it rises from there as soon as entropy falls under the target."""
    from jaxrl_llm.runners.stabilisers import META_KEY, StepStabilisers

    config = config_for("grpo")
    with config.unlocked():
        config.stabilise.entropy_target, config.loss.entropy_coef = 0.7, 0.005
        config.stabilise.entropy_rate, config.stabilise.entropy_min_coef = 1.0, 0.005
    meta = {}
    stabilisers = StepStabilisers(config, pad_id=0, meta=meta)
    for _ in range(10):  # the base model at temperature 1: 1.9 nats
        stabilisers.observe({"train/entropy": 1.9})
    assert meta[META_KEY] == 0.005
    stabilisers.observe({"train/entropy": 0.4})
    assert meta[META_KEY] == pytest.approx(0.005 * math.exp(0.3))


def test_bad_clip_cov_settings_name_the_field():
    config = config_for("grpo")
    config.stabilise.clip_cov_fraction = 1.0
    with pytest.raises(ValueError, match=r"clip_cov_fraction=1.0 must lie in \[0, 1\)"):
        validate_stabilisers(config)
    config.stabilise.clip_cov_fraction = 0.02
    config.stabilise.clip_cov_low = 5.0
    with pytest.raises(ValueError, match="clip_cov_low=5.0 must be below clip_cov_high=5.0"):
        validate_stabilisers(config)
    config = config_for("rrhf")
    config.stabilise.clip_cov_fraction = 0.02
    with pytest.raises(ValueError, match="algorithm='rrhf' does not use"):
        validate_stabilisers(config)


def test_clip_cov_draws_are_new_each_step_and_the_same_on_resume():
    """`prepare` adds uniform per-token draws; the k-th batch of a run draws the same whether
    or not the run was resumed in between (the count is in the checkpointed meta)."""
    import jax.numpy as jnp

    from jaxrl_llm.algorithms.batch import PolicyBatch
    from jaxrl_llm.runners.stabilisers import StepStabilisers

    config = config_for("grpo")
    config.stabilise.clip_cov_fraction = 0.02
    z = jnp.zeros((4, 6))
    batch = PolicyBatch(jnp.zeros((4, 6), jnp.int32), z, z, z, jnp.zeros(4))
    meta = {}
    run = StepStabilisers(config, pad_id=0, meta=meta)
    first, second = (np.asarray(run.prepare(batch).token_noise) for _ in range(2))
    assert first.shape == (4, 6) and first.dtype == np.float32
    assert ((first >= 0) & (first < 1)).all() and not np.array_equal(first, second)
    resumed = StepStabilisers(config, pad_id=0, meta={"clip_cov_draws": 1})
    np.testing.assert_array_equal(np.asarray(resumed.prepare(batch).token_noise), second)
    config.seed = 1
    other_seed = StepStabilisers(config, pad_id=0, meta={})
    assert not np.array_equal(np.asarray(other_seed.prepare(batch).token_noise), first)
    config.stabilise.clip_cov_fraction = 0.0
    assert StepStabilisers(config, pad_id=0, meta={}).prepare(batch).token_noise is None


def test_an_entropy_target_ratio_takes_its_target_from_the_first_measured_step():
    """`entropy_target_ratio`: the target is that share of the first step whose rows carried a
    loss; it is kept in the run's meta, so a resumed run keeps it rather than re-measuring."""
    from jaxrl_llm.runners.stabilisers import META_KEY, TARGET_KEY, StepStabilisers

    config = config_for("grpo")
    config.stabilise.entropy_target_ratio, config.stabilise.entropy_rate = 0.5, 2.0
    config.loss.entropy_coef = config.stabilise.entropy_min_coef = 0.005
    config.stabilise.entropy_max_coef = 0.5
    meta = {}
    control = StepStabilisers(config, pad_id=0, meta=meta)
    assert control.observe({"train/entropy": 0.0}, trained_tokens=False) == {}
    assert TARGET_KEY not in meta  # an all-masked step measured nothing
    first = control.observe({"train/entropy": 1.6})
    assert first == {"stabilise/entropy_coef": 0.005, "stabilise/entropy_target": 0.8}
    assert meta[META_KEY] == 0.005  # above the target: held at the floor
    control.observe({"train/entropy": 0.5})  # 0.3 nats under: x exp(2 x 0.3)
    assert meta[META_KEY] == pytest.approx(0.005 * math.exp(0.6))
    resumed = StepStabilisers(config, pad_id=0, meta=dict(meta))
    assert resumed.observe({"train/entropy": 2.0})["stabilise/entropy_target"] == 0.8


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"entropy_target_ratio": 1.0}, r"entropy_target_ratio=1.0 must lie in \[0, 1\)"),
        ({"entropy_target_ratio": -0.1}, r"entropy_target_ratio=-0.1 must lie in \[0, 1\)"),
        (
            {"entropy_target_ratio": 0.5, "entropy_target": 0.7},
            "both set the entropy target: set one of them to 0",
        ),
        ({"entropy_target_ratio": 0.5, "entropy_rate": 0.0}, "entropy_rate=0.0 must be > 0"),
        ({"clip_cov_target_ratio": 0.8}, "which is off \\(clip_cov_fraction=0\\)"),
        ({"clip_cov_fraction": 0.1, "clip_cov_target_ratio": 1.5}, r"must lie in \[0, 1\]"),
        ({"clip_cov_fraction": 0.1, "clip_cov_target_ratio": 0.8, "clip_cov_rate": 0.0},
         "clip_cov_rate=0.0 must be > 0"),
        ({"clip_cov_fraction": 0.5, "clip_cov_target_ratio": 0.8},
         r"clip_cov_fraction=0.5 is where the adaptive share starts"),
        ({"clip_cov_fraction": 0.1, "clip_cov_target_ratio": 0.8, "clip_cov_min_fraction": 0.0},
         "0 < clip_cov_min_fraction"),
    ],
)  # fmt: skip
def test_bad_adaptive_entropy_settings_name_the_field(fields, message):
    """The entropy weight's relative target, and Clip-Cov's adaptive share."""
    config = config_for("grpo")
    for name, value in fields.items():
        setattr(config.stabilise, name, value)
    with pytest.raises(ValueError, match=message):
        validate_stabilisers(config)


def test_an_adaptive_clip_cov_share_follows_its_entropy_target():
    """`clip_cov_target_ratio`: the share starts at clip_cov_fraction, goes into every batch row,
    falls while entropy is over the target (set by the first measured step) and rises under
    it, within its bounds; the share and target are kept in the meta for a resumed run."""
    import jax.numpy as jnp

    from jaxrl_llm.algorithms.batch import PolicyBatch
    from jaxrl_llm.runners.stabilisers import CLIP_COV_KEY, CLIP_COV_TARGET_KEY, StepStabilisers

    config = config_for("grpo")
    s = config.stabilise
    s.clip_cov_fraction, s.clip_cov_target_ratio, s.clip_cov_rate = 0.1, 0.8, 1.0
    s.clip_cov_min_fraction, s.clip_cov_max_fraction = 0.002, 0.3
    meta = {}
    control = StepStabilisers(config, pad_id=0, meta=meta)
    z = jnp.zeros((4, 6))
    batch = control.prepare(PolicyBatch(jnp.zeros((4, 6), jnp.int32), z, z, z, jnp.zeros(4)))
    np.testing.assert_allclose(np.asarray(batch.clip_cov_fraction), [0.1] * 4)
    assert batch.token_noise is not None
    assert control.observe({"train/entropy": 0.0}, trained_tokens=False) == {}
    first = control.observe({"train/entropy": 1.5})  # target 1.2: 0.3 nats over, x exp(-0.3)
    assert first == pytest.approx(
        {"stabilise/clip_cov_fraction": 0.1, "stabilise/clip_cov_target": 1.2}
    )
    assert meta[CLIP_COV_KEY] == pytest.approx(0.1 * math.exp(-0.3))
    control.observe({"train/entropy": 0.7})  # 0.5 nats under: x exp(0.5)
    assert meta[CLIP_COV_KEY] == pytest.approx(0.1 * math.exp(0.2))
    control.observe({"train/entropy": 0.0})  # far under: held at the ceiling
    assert meta[CLIP_COV_KEY] == 0.3
    control.observe({"train/entropy": 9.0})  # far over: held at the floor
    assert meta[CLIP_COV_KEY] == 0.002
    resumed = StepStabilisers(config, pad_id=0, meta=dict(meta))
    assert resumed.observe({"train/entropy": 1.2}) == pytest.approx(
        {"stabilise/clip_cov_fraction": 0.002, "stabilise/clip_cov_target": 1.2}
    )
    assert meta[CLIP_COV_TARGET_KEY] == pytest.approx(1.2)
    s.clip_cov_target_ratio = 0.0  # a fixed share adds no per-row field
    fixed = StepStabilisers(config, pad_id=0, meta={})
    unchanged = fixed.prepare(PolicyBatch(jnp.zeros((4, 6), jnp.int32), z, z, z, z[:, 0]))
    assert unchanged.clip_cov_fraction is None
    assert fixed.observe({"train/entropy": 1.0}) == {}
