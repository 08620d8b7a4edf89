"""gin at the edge: bindings set config fields (gin wins), clear errors, reward-function
arguments, and a run whose clip range and estimator a gin file changes (checked on what the
algorithm actually used)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from jaxrl_llm import gin_bindings
from jaxrl_llm.algorithms import grpo
from jaxrl_llm.config import config_for, grpo_config
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import train
from jaxrl_llm.runners.components import build_rewards
from jaxrl_llm.stages import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")
GIN_DIR = os.path.join(ROOT, "experiments", "gin")


@pytest.fixture(autouse=True)
def _clean_gin():
    gin_bindings.clear()
    yield
    gin_bindings.clear()


def test_binding_sets_the_config_field_and_wins_over_the_config(capsys):
    config = grpo_config()
    config.loss.clip_low = 0.3  # as a --config.loss.clip_low flag would
    gin_bindings.parse([os.path.join(GIN_DIR, "clip_rloo.gin")], ["optimizer.b2 = 0.95"])
    gin_bindings.apply_to_config(config)
    assert (config.loss.clip_low, config.loss.clip_high, config.loss.advantage) == (
        0.1,
        0.15,
        "rloo",
    )
    assert config.optimizer.b2 == 0.95
    out = capsys.readouterr().out
    assert "gin: loss.clip_low = 0.1 overrides 0.3" in out
    assert "gin: optimizer.b2 = 0.95 overrides 0.99" in out


def test_dr_grpo_file_and_the_length_rule_in_one_place():
    config = grpo_config()
    gin_bindings.parse([os.path.join(GIN_DIR, "dr_grpo.gin")])
    gin_bindings.apply_to_config(config)
    loss_config = grpo.GRPOLossConfig.from_config(config)
    assert config.loss.normalize_std is False
    assert loss_config.agg == "seq-mean-token-sum-norm"
    assert loss_config.norm_len == config.rollout.max_new_tokens


def test_critic_section_binds_only_where_the_algorithm_has_it():
    gin_bindings.parse([], ["critic.learning_rate = 1e-4"])
    ppo = gin_bindings.apply_to_config(config_for("ppo"))
    assert ppo.critic.learning_rate == 1e-4
    with pytest.raises(gin_bindings.GinConfigError, match="no section 'critic'"):
        gin_bindings.apply_to_config(grpo_config())


def test_format_bonus_file_adds_the_format_reward_with_bound_arguments():
    config = grpo_config()
    gin_bindings.parse([os.path.join(GIN_DIR, "format_bonus.gin")])
    gin_bindings.apply_to_config(config)
    runner = build_rewards(config)
    assert sorted(runner.functions) == ["format", "task"]
    assert runner.weights == {"task": 1.0, "format": 0.1} and runner.timeout_s == 2.0
    assert runner.functions["format"].keywords == {"max_chars": 40}


def test_users_own_function_resolves_with_gin_winning():
    def my_loss(x, *, clip=0.2, coef=1.0):
        return x * clip * coef

    gin_bindings.register(my_loss)
    gin_bindings.parse([], ["my_loss.clip = 0.5"])
    assert gin_bindings.resolve(my_loss, clip=0.2, coef=3.0) == {"clip": 0.5, "coef": 3.0}
    assert gin_bindings.configured(my_loss, 2.0, clip=0.2) == 1.0


@pytest.mark.parametrize(
    "binding, expected",
    [
        ("los.clip_low = 0.1", "Did you mean loss"),
        ("GRPOLossConfig.clip_low = 0.1", "is now a config section: bind loss"),
        ("format_reward.max_char = 5", "max_char"),
        ("loss.clip_low = ", "Unable to parse"),
    ],
)
def test_bad_bindings_fail_with_a_hint(binding, expected):
    with pytest.raises(gin_bindings.GinConfigError, match="^gin: ") as info:
        gin_bindings.parse([], [binding])
    assert expected in str(info.value)
    assert "Configurables: critic, eval" in str(info.value)


def test_unknown_field_of_a_section_lists_close_matches():
    gin_bindings.parse([], ["loss.clip_lo = 0.1"])
    with pytest.raises(gin_bindings.GinConfigError, match="Did you mean loss.clip_low"):
        gin_bindings.apply_to_config(grpo_config())
    with pytest.raises(gin_bindings.GinConfigError, match="cannot read a gin file"):
        gin_bindings.parse(["no/such/file.gin"])


def test_cli_reports_gin_errors_before_training(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "jaxrl_llm.main",
        "--config",
        TINY,
        "--workdir",
        str(tmp_path / "w"),
        "--no_progress",
        "--gin_bindings",
        "loss.advantage = 'ppo'",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "error: config.loss.advantage='ppo' must be one of ('grpo', 'rloo')" in proc.stderr
    assert not os.path.exists(tmp_path / "w" / "metrics.jsonl")


def test_gin_file_changes_the_clip_range_and_estimator_the_run_uses(tmp_path, monkeypatch):
    """A gin file changes the clip range and the advantage estimator of a run."""
    used_configs, used_estimators, advantages = [], [], []
    real_loss, real_advantages = grpo.policy_loss, grpo.group_advantages

    def spy_loss(model, batch, *, config):
        used_configs.append(config)
        return real_loss(model, batch, config=config)

    def spy_advantages(rewards, group, **kwargs):
        used_estimators.append(kwargs)
        out = real_advantages(rewards, group, **kwargs)
        advantages.append((np.asarray(rewards), out))
        return out

    monkeypatch.setattr(grpo, "policy_loss", spy_loss)
    monkeypatch.setattr(grpo, "group_advantages", spy_advantages)
    config = load_config(TINY, {"train.num_steps": 1, "eval.before": False, "eval.after": False})
    assert (config.loss.clip_low, config.loss.advantage) == (0.2, "grpo")
    gin_bindings.parse([os.path.join(GIN_DIR, "clip_rloo.gin")])
    gin_bindings.apply_to_config(config)
    train(config, str(tmp_path), progress=False)

    assert used_configs and {(c.clip_low, c.clip_high) for c in used_configs} == {(0.1, 0.15)}
    assert used_estimators == [{"estimator": "rloo", "normalize_std": True}]
    rewards, adv = advantages[0]
    expected = real_advantages(rewards, config.rollout.group_size, estimator="rloo")
    np.testing.assert_array_equal(adv, expected)
    assert [r["step"] for r in read_metrics(str(tmp_path))] == [1]
