"""PPO's levers from Xu et al. (2404.10719) and VC-PPO (2503.01491) as config: decoupled critic
and actor lambdas, value pretraining's Monte Carlo targets, worked by hand on a PPO batch; and
the bad input of each lever (and of the batch's minibatches and micro-batches), one line naming
the field and the fix."""

import types

import numpy as np
import pytest

from jaxrl_llm.algorithms import Algorithm, Experience, check_algorithm, make
from jaxrl_llm.config import config_for, validate_config

# One 3-token completion (columns 1-3) and one 1-token completion (column 1); T = 4.
MASK = np.array([[0, 1, 1, 1], [0, 1, 0, 0]], np.float32)
VALUES = np.array([[0, 0.5, 0.4, 0.2], [0, 0.3, 0, 0]], np.float32)


def _experience():
    rollout = types.SimpleNamespace(
        tokens=np.ones((2, 4), np.int32),
        completion_mask=MASK.astype(bool),
        logprobs=-MASK,
        finish_reason=np.ones(2, np.int32),
    )
    return Experience(rollout, np.array([1.0, 0.0], np.float32), 2, values=VALUES)


def _ppo(**loss):
    config = config_for("ppo")
    config.loss.update(dict(kl_beta=0.0, gamma=1.0, whiten_advantages=False, **loss))
    return config


def test_critic_lambda_sets_the_returns_and_lambda_the_advantages():
    algorithm = make(_ppo(lam=0.5, critic_lam=1.0))
    batch, _ = algorithm.make_batch(_experience(), algorithm.init())
    # Row 0, r = [0, 0, 1]: d3 = 1 - 0.2 = 0.8, d2 = 0.2 - 0.4 = -0.2, d1 = 0.4 - 0.5 = -0.1.
    #   lambda 0.5: A3 = 0.8, A2 = -0.2 + 0.4 = 0.2, A1 = -0.1 + 0.1 = 0.0
    #   lambda 1:   A'3 = 0.8, A'2 = 0.6, A'1 = 0.5; R = A' + V = [1, 1, 1], the reward-to-go
    # Row 1, r = [0]: A = A' = -0.3, R = 0.
    np.testing.assert_allclose(batch.advantages, [[0, 0.0, 0.2, 0.8], [0, -0.3, 0, 0]], atol=1e-6)
    np.testing.assert_allclose(batch.returns, [[0, 1.0, 1.0, 1.0], [0, 0.0, 0, 0]], atol=1e-6)
    # critic_lam -1 (the default) takes lam for both: R = A + V = [0.5, 0.6, 1.0]
    coupled = make(_ppo(lam=0.5))
    same, _ = coupled.make_batch(_experience(), coupled.init())
    np.testing.assert_allclose(same.advantages, batch.advantages, atol=1e-6)
    np.testing.assert_allclose(same.returns, [[0, 0.5, 0.6, 1.0], [0, 0.0, 0, 0]], atol=1e-6)


def test_value_pretraining_targets_are_monte_carlo_returns():
    config = _ppo(lam=0.5)  # critic_lam -1: RL's targets bootstrap with lambda 0.5
    config.critic.pretrain_steps = 3
    algorithm = make(config)
    assert algorithm.critic_pretrain_steps == 3
    batch, _ = algorithm.critic_pretrain_batch(_experience(), algorithm.init())
    np.testing.assert_allclose(batch.returns, [[0, 1.0, 1.0, 1.0], [0, 0.0, 0, 0]], atol=1e-6)
    np.testing.assert_allclose(batch.old_values, VALUES)  # the clip's centre: rollout values
    with pytest.raises(ValueError, match=r"critic_pretrain_steps=2 needs a 'critic' role"):
        check_algorithm(Algorithm("mine", None, None, critic_pretrain_steps=2))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"reference.ema_decay": 1.0}, r"config.reference.ema_decay=1.0 must be in \[0, 1\)"),
        ({"reference.ema_decay": -0.1}, r"config.reference.ema_decay=-0.1 must be in \[0, 1\)"),
        (
            {"reference.ema_decay": 0.99, "loss.kl_beta": 0.0},
            r"ema_decay=0.99 moves a reference that no loss reads \(config.loss.kl_beta=0.0\)",
        ),
        (
            {"reference.ema_decay": 0.99, "model.lora": {"rank": 8}},
            r"config.reference.ema_decay=0.99 with config.model.lora.rank=8: .* set "
            r"config.reference.ema_decay=0, or config.model.lora.rank=0",
        ),
        ({"loss.critic_lam": 1.5}, r"config.loss.critic_lam=1.5 must be in \[0, 1\], or -1"),
        ({"critic.pretrain_steps": -1}, r"config.critic.pretrain_steps=-1 must be an int >= 0"),
        (  # the batch does not divide into the minibatches
            {"train.num_minibatches": 3},
            r"config.train.num_minibatches=3 must divide num_prompts \* group_size = 32",
        ),
        (  # nor a minibatch into the micro-batches
            {"train.num_minibatches": 2, "train.grad_accumulation": 3},
            r"config.train.grad_accumulation=3 must divide the 16 rows of a minibatch",
        ),
        (
            {"train.grad_accumulation": 2, "train.planned_step": "plans/executables/actor_train"},
            r"grad_accumulation=2 with config.train.planned_step: .* set grad_accumulation=1",
        ),
    ],
)
def test_bad_lever_input_is_one_line_naming_the_field(fields, message):
    config = config_for("ppo")
    for dotted, value in fields.items():
        section, name = dotted.split(".")
        if isinstance(value, dict):
            config[section][name].update(value)
        else:
            config[section][name] = value
    with pytest.raises(ValueError, match=message) as error:
        validate_config(config)
    assert "\n" not in str(error.value)


def test_value_pretraining_and_accumulation_need_what_they_use():
    config = config_for("ppo")  # reinforce_pp's loss fields are all PPO's: the switch passes
    with config.unlocked():
        config.algorithm = "reinforce_pp"
    config.critic.pretrain_steps = 2
    with pytest.raises(ValueError, match=r"pretrain_steps=2 pretrains a critic, and config."):
        validate_config(config)
    config.critic.pretrain_steps = 0
    validate_config(config)  # the rest of the switched config is fine
    online_dpo = config_for("online_dpo")
    online_dpo.train.grad_accumulation = 2
    with pytest.raises(ValueError, match=r"config.algorithm='online_dpo' has not: set grad_"):
        validate_config(online_dpo)
