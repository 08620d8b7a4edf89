"""PPO, REINFORCE++ and ReMax as values: their batches on hand-made experiences worked out from the
papers, the adaptive KL controller through `update`, the critic loss, and the registry."""

import types

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm import advantages, losses
from jaxrl_llm.algorithms import Algorithm, Experience, GreedyBaseline, get, make, names, register
from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss
from jaxrl_llm.config import config_for, validate_config
from jaxrl_llm.models import (
    ScalarHeadModel,
    init_model,
    load_scalar_model,
    save_scalar_model,
    tiny_config,
)

# One prompt (positions 0-1) and a 2-token completion (positions 2-3) per row; T = 5.
MASK = np.array([[0, 0, 1, 1, 0], [0, 0, 1, 0, 0]], np.float32)


def _rollout(finish_reason=(1, 1)):
    tokens = np.array([[5, 6, 7, 8, 0], [5, 6, 9, 0, 0]], np.int32)
    logp = np.array([[0, 0, -1.0, -2.0, 0], [0, 0, -0.5, 0, 0]], np.float32)
    return types.SimpleNamespace(
        tokens=tokens,
        completion_mask=MASK.astype(bool),
        logprobs=logp,
        finish_reason=np.asarray(finish_reason, np.int32),
    )


def _config(name, **loss):
    config = config_for(name)
    config.loss.update(loss)
    return config


def test_ppo_batch_is_gae_of_kl_shaped_rewards_worked_by_hand():
    config = _config("ppo", kl_beta=0.1, gamma=1.0, lam=0.95, whiten_advantages=False)
    algorithm = make(config)
    assert set(algorithm.roles) == {"actor", "rollout", "reward", "critic", "reference"}
    rollout = _rollout()
    # k1 KL per token: old - ref = 0.1 and 0.2 on row 0, 0.0 on row 1.
    ref = rollout.logprobs - np.array([[0, 0, 0.1, 0.2, 0], [0, 0, 0.0, 0, 0]], np.float32)
    values = np.array([[0, 0, 0.5, 0.8, 0], [0, 0, 0.3, 0, 0]], np.float32)
    experience = Experience(
        rollout, np.array([1.0, 0.0], np.float32), 2, ref_logp=ref, values=values
    )
    batch, scalars = algorithm.make_batch(experience, algorithm.init())
    # Row 0: r = [-0.01, 1 - 0.02 = 0.98]; delta_3 = 0.98 - 0.8 = 0.18 = A_3;
    # delta_2 = -0.01 + 0.8 - 0.5 = 0.29, A_2 = 0.29 + 0.95 * 0.18 = 0.461; R = A + V.
    # Row 1: r = [0.0], A = 0 - 0.3 = -0.3, R = 0.
    np.testing.assert_allclose(
        batch.advantages, [[0, 0, 0.461, 0.18, 0], [0, 0, -0.3, 0, 0]], atol=1e-6
    )
    np.testing.assert_allclose(
        batch.returns, [[0, 0, 0.961, 0.98, 0], [0, 0, 0.0, 0, 0]], atol=1e-6
    )
    np.testing.assert_array_equal(batch.old_values, values)
    np.testing.assert_array_equal(batch.ref_logp, ref)
    # kl: mean over sequences of the per-token mean: (0.15 + 0.0) / 2.
    np.testing.assert_allclose(scalars["kl"], 0.075, atol=1e-6)
    assert scalars["kl_coef"] == pytest.approx(0.1)


def test_ppo_whitens_advantages_and_penalises_a_missing_eos():
    config = _config("ppo", kl_beta=0.0, missing_eos_penalty=1.0)
    algorithm = make(config)
    assert "reference" not in algorithm.roles
    rollout = _rollout(finish_reason=(1, 0))  # row 1 hit the length limit
    values = np.zeros((2, 5), np.float32)
    experience = Experience(rollout, np.array([1.0, 1.0], np.float32), 2, values=values)
    batch, _ = algorithm.make_batch(experience, algorithm.init())
    # Scores 1 and 1 - 1 = 0; lam 0.95, gamma 1, V = 0: A = [0.95, 1.0] and [0.0].
    raw = np.array([[0, 0, 0.95, 1.0, 0], [0, 0, 0.0, 0, 0]], np.float32)
    np.testing.assert_allclose(batch.advantages, advantages.whiten(raw, MASK), atol=1e-6)
    valid = batch.advantages[MASK > 0]
    np.testing.assert_allclose([valid.mean(), valid.std(ddof=1)], [0.0, 1.0], atol=1e-3)


def _dense_config(**loss):
    config = _config("ppo", **loss)
    config.rewards.process_placement = "dense"
    config.rewards.process_model = "runs/prm/process_reward_model"
    return config


def test_ppo_dense_process_rewards_are_gae_of_step_rewards_worked_by_hand():
    """Each step's reward on its step's last token, the success reward on the final token,
    through GAE (gamma 1, lambda 0.5, no KL, no whitening)."""
    algorithm = make(_dense_config(kl_beta=0.0, gamma=1.0, lam=0.5, whiten_advantages=False))
    assert algorithm.step_rewards and "critic" in algorithm.roles
    # Row 0: completion at columns 2-5 (EOS at 5); step 1 ends on 3 (-0.3), step 2 on 4 (-0.1);
    # success 1, so the total reward is 1 - 0.4 = 0.6. Row 1: a completion with no step.
    mask = np.array([[0, 0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0, 0]], np.float32)
    rollout = types.SimpleNamespace(
        tokens=np.ones((2, 7), np.int32),
        completion_mask=mask.astype(bool),
        logprobs=-mask,
        finish_reason=np.array([1, 1], np.int32),
    )
    values = np.array([[0, 0, 0.2, 0.4, 0.5, 0.6, 0], [0, 0, 0.5, 0.5, 0, 0, 0]], np.float32)
    experience = Experience(
        rollout,
        np.array([0.6, 1.0], np.float32),
        2,
        values=values,
        step_rewards=np.array([[-0.3, -0.1], [0.0, 0.0]], np.float32),
        step_columns=np.array([[3, 4], [-1, -1]], np.int32),
    )
    batch, scalars = algorithm.make_batch(experience, algorithm.init())
    # Row 0, r = [0, -0.3, -0.1, 1.0] on columns 2-5, backwards:
    #   d5 = 1.0 - 0.6 = 0.4                 A5 = 0.4
    #   d4 = -0.1 + 0.6 - 0.5 = 0.0          A4 = 0.0 + 0.5 * 0.4 = 0.2
    #   d3 = -0.3 + 0.5 - 0.4 = -0.2         A3 = -0.2 + 0.5 * 0.2 = -0.1
    #   d2 = 0.0 + 0.4 - 0.2 = 0.2           A2 = 0.2 + 0.5 * -0.1 = 0.15
    # Row 1, r = [0, 1]: d3 = 1 - 0.5 = 0.5 = A3; d2 = 0 + 0.5 - 0.5 = 0, A2 = 0.25.
    np.testing.assert_allclose(
        batch.advantages,
        [[0, 0, 0.15, -0.1, 0.2, 0.4, 0], [0, 0, 0.25, 0.5, 0, 0, 0]],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        batch.returns,
        [[0, 0, 0.35, 0.3, 0.7, 1.0, 0], [0, 0, 0.75, 1.0, 0, 0, 0]],
        atol=1e-6,
    )
    assert scalars["process_steps_placed"] == 1.0  # (2 + 0) / 2 rows
    # Summed (the default), the same total sits on the last token: other advantages.
    summed = make(_config("ppo", kl_beta=0.0, gamma=1.0, lam=0.5, whiten_advantages=False))
    assert not summed.step_rewards
    other, _ = summed.make_batch(experience, summed.init())
    # Row 0, r = [0, 0, 0, 0.6]: A5 = 0, A4 = 0.1, A3 = 0.1 + 0.05, A2 = 0.2 + 0.075.
    np.testing.assert_allclose(other.advantages[0, 2:6], [0.275, 0.15, 0.1, 0.0], atol=1e-6)


def test_ppo_dense_needs_the_steps_in_the_experience():
    algorithm = make(_dense_config(kl_beta=0.0))
    experience = Experience(_rollout(), np.array([1.0, 0.0], np.float32), 2, values=MASK * 0)
    with pytest.raises(ValueError, match=r"process_placement='dense' needs the experience's"):
        algorithm.make_batch(experience, algorithm.init())


@pytest.mark.parametrize(
    "algorithm, rewards, message",
    [
        (
            "grpo",
            {"process_placement": "dense", "process_model": "prm"},
            r"config.rewards.process_placement='dense' needs an algorithm with a critic.*"
            r"config.algorithm='grpo' has none",
        ),
        (
            "ppo",
            {"process_placement": "dense"},
            r"config.rewards.process_placement='dense' .* config.rewards.process_model is empty",
        ),
        (
            "ppo",
            {"process_placement": "densee"},
            r"config.rewards.process_placement='densee' must be one of \('summed', 'dense'\)",
        ),
        (
            "ppo",
            {"process_model": "prm", "process_refinement": "clip", "process_eta": 1.5},
            r"config.rewards.process_eta=1.5 is outside the process reward's range \(0, 1\]",
        ),
        (
            "grpo",
            {"process_model": "prm", "process_refinement": "clip", "process_eta": 0.0},
            r"config.rewards.process_eta=0.0 is outside",
        ),
    ],
)
def test_dense_process_reward_config_errors_name_the_field(algorithm, rewards, message):
    config = config_for(algorithm)
    config.rewards.update(rewards)
    with pytest.raises(ValueError, match=message) as error:
        validate_config(config)
    assert "\n" not in str(error.value)  # one line


def test_adaptive_kl_controller_through_update():
    config = _config("ppo", kl_beta=0.05, kl_target=0.1, kl_horizon=10)
    algorithm = make(config)
    state = algorithm.init()
    # e = clip(0.5 / 0.1 - 1, -0.2, 0.2) = 0.2; beta' = 0.05 * (1 + 0.2 * 2 / 10) = 0.052.
    state = algorithm.update(state, {"kl": 0.5, "batch_size": 2})
    np.testing.assert_allclose(state.coef, 0.052, rtol=1e-6)
    # Below target: e = clip(0 / 0.1 - 1) = -0.2; beta'' = 0.052 * (1 - 0.04).
    state = algorithm.update(state, {"kl": 0.0, "batch_size": 2})
    np.testing.assert_allclose(state.coef, 0.052 * 0.96, rtol=1e-6)
    fixed = make(_config("ppo", kl_beta=0.05))
    assert fixed.update(fixed.init(), {"kl": 0.5, "batch_size": 2}).coef == pytest.approx(0.05)


def test_ppo_critic_loss_is_the_clipped_value_loss_of_the_value_model():
    config = _config("ppo")
    algorithm = make(config)
    critic = ScalarHeadModel.from_policy(
        init_model(tiny_config(), seed=0), seed=1, head_init="normal"
    )
    rollout = _rollout()
    values = np.asarray(critic.token_scores(jnp.asarray(rollout.tokens)))
    experience = Experience(rollout, np.array([1.0, 0.0], np.float32), 2, values=values + 0.5)
    batch, _ = algorithm.make_batch(experience, algorithm.init())
    loss, metrics = algorithm.critic_loss(critic, batch)
    expected, _ = losses.value_loss(
        jnp.asarray(values), batch.old_values, batch.returns, batch.loss_mask, clip=0.2
    )
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    # The old values sit 0.5 away: clipping moves every valid token to old - 0.2.
    assert float(metrics["clipfrac"]) > 0


def test_value_head_alignment_and_save_load(tmp_path):
    critic = ScalarHeadModel.from_policy(
        init_model(tiny_config(), seed=0), seed=1, head_init="normal"
    )
    tokens = jnp.asarray([[5, 6, 7, 8]], jnp.int32)
    values = critic.token_scores(tokens)
    assert float(values[0, 0]) == 0.0 and float(jnp.abs(values[0, 1:]).min()) > 0
    fresh_critic = ScalarHeadModel.from_policy(init_model(tiny_config(), seed=0))
    np.testing.assert_array_equal(fresh_critic.token_scores(tokens), 0.0)  # zero head: V = 0
    # Column t reads the hidden state at t - 1: changing the last token leaves every value.
    other = critic.token_scores(tokens.at[0, 3].set(9))
    np.testing.assert_allclose(values, other, atol=1e-6)
    scores = critic.sequence_scores(tokens, jnp.asarray([3]))
    np.testing.assert_allclose(scores[0], values[0, 3], atol=1e-6)
    save_scalar_model(critic, str(tmp_path / "rm"))
    loaded = load_scalar_model(str(tmp_path / "rm"))
    np.testing.assert_allclose(loaded.token_scores(tokens), values, atol=1e-6)
    with pytest.raises(FileNotFoundError, match="save_scalar_model"):
        load_scalar_model(str(tmp_path / "missing"))


def test_reinforce_pp_batch_is_whitened_discounted_returns():
    algorithm = make(_config("reinforce_pp", kl_beta=0.1))
    rollout = _rollout()
    ref = rollout.logprobs - np.array([[0, 0, 0.1, 0.2, 0], [0, 0, 0.3, 0, 0]], np.float32)
    experience = Experience(rollout, np.array([1.0, 0.0], np.float32), 2, ref_logp=ref)
    batch, scalars = algorithm.make_batch(experience, algorithm.init())
    # Token rewards [-0.01, 0.98] and [-0.03]; returns [0.97, 0.98] and [-0.03], whitened.
    returns = np.array([[0, 0, 0.97, 0.98, 0], [0, 0, -0.03, 0, 0]], np.float32)
    np.testing.assert_allclose(batch.advantages, advantages.whiten(returns, MASK), atol=1e-6)
    np.testing.assert_allclose(scalars["kl"], (0.15 + 0.3) / 2, atol=1e-6)


def test_remax_advantage_is_reward_minus_greedy_reward():
    algorithm = make(_config("remax"))
    assert algorithm.collects == (GreedyBaseline(),) and algorithm.baseline_rollout
    assert "critic" not in algorithm.roles
    experience = Experience(
        _rollout(), np.array([1.0, 0.0], np.float32), 2, baseline_rewards=np.array([1.0, 1.0])
    )
    batch, scalars = algorithm.make_batch(experience, algorithm.init())
    np.testing.assert_allclose(batch.advantages, [0.0, -1.0])
    assert scalars == {"baseline_reward": 1.0}
    with pytest.raises(ValueError, match="baseline_rewards"):
        algorithm.make_batch(experience._replace(baseline_rewards=None), ())


def test_registry_finds_builtins_and_names_close_matches():
    assert {"grpo", "ppo", "reinforce_pp", "remax"} <= set(names())
    assert get("ppo").name == "ppo"
    with pytest.raises(KeyError, match="Did you mean ppo"):
        get("ppp")
    config = config_for("grpo")
    with config.unlocked():
        config.algorithm = "ppo"
    with pytest.raises(ValueError, match=r"needs config.loss.critic_lam .*config_for\('ppo'\)"):
        validate_config(config)


def test_a_new_algorithm_is_one_registration(tmp_path):
    """Sign-of-reward policy gradient, defined here, runs through the same runner."""

    def make_sign_pg(config):
        loss_config = PolicyLossConfig.from_config(config)

        def make_batch(experience, state):
            from jaxrl_llm.algorithms import build_batch

            return build_batch(experience.rollout, np.sign(experience.rewards - 0.5)), {}

        return Algorithm("sign_pg", make_batch, lambda m, b: policy_loss(m, b, config=loss_config))

    register("sign_pg", make=make_sign_pg, default_config=lambda: get("grpo").default_config())
    from jaxrl_llm.config import make_tiny
    from jaxrl_llm.metrics import read_metrics
    from jaxrl_llm.runners import train

    config = make_tiny(config_for("sign_pg"))
    config.train.num_steps = 1
    config.eval.before = config.eval.after = False
    summary = train(config, str(tmp_path), progress=False)
    assert summary["algorithm"] == "sign_pg" and summary["steps"] == 1
    assert read_metrics(str(tmp_path))[0]["train/rows"] == 8
