"""gin bindings: precedence over config fields, clear errors, and a run whose loss and estimator a gin
file changes (checked on what the runner actually built)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from jaxrl_llm import gin_bindings
from jaxrl_llm.algorithms.grpo import GRPOLossConfig
from jaxrl_llm.config import load_config
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import sync as sync_runner
from jaxrl_llm.runners import train
from jaxrl_llm.runners.components import build_rewards

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")
GIN_DIR = os.path.join(ROOT, "experiments", "gin")


@pytest.fixture(autouse=True)
def _clean_gin():
    gin_bindings.clear()
    yield
    gin_bindings.clear()


def test_config_values_stay_the_defaults_when_gin_binds_nothing(capsys):
    config = load_config(TINY, {"loss.clip_low": 0.25, "loss.kl_beta": 0.01})
    loss_config = sync_runner._loss_config(config)
    assert isinstance(loss_config, GRPOLossConfig)
    loss = config.loss
    assert (loss_config.clip_low, loss_config.clip_high, loss_config.kl_beta) == (0.25, 0.28, 0.01)
    assert (loss_config.kl_estimator, loss_config.entropy_coef, loss_config.agg) == (
        loss.kl_estimator,
        loss.entropy_coef,
        loss.agg,
    )
    assert loss_config.temperature == config.rollout.temperature
    assert "gin:" not in capsys.readouterr().out
    assert gin_bindings.resolve("group_advantages", estimator="grpo", normalize_std=True) == {
        "estimator": "grpo",
        "normalize_std": True,
    }


def test_gin_bindings_win_over_config_fields_and_are_reported(capsys):
    gin_bindings.parse([os.path.join(GIN_DIR, "clip_rloo.gin")], ["GRPOLossConfig.kl_beta = 0.05"])
    config = load_config(TINY, {"loss.clip_low": 0.3})  # a command-line override loses to gin too
    loss_config = sync_runner._loss_config(config)
    assert (loss_config.clip_low, loss_config.clip_high, loss_config.kl_beta) == (0.1, 0.15, 0.05)
    assert loss_config.temperature == config.rollout.temperature  # not bindable
    assert loss_config.agg == "token-mean"  # unbound: the config's value
    out = capsys.readouterr().out
    assert "gin: GRPOLossConfig.clip_low = 0.1 overrides 0.3" in out
    assert (
        gin_bindings.resolve("group_advantages", estimator="grpo", normalize_std=True)["estimator"]
        == "rloo"
    )


def test_dr_grpo_gin_file_sets_the_normaliser_and_unbound_agg_drops_it():
    gin_bindings.parse([os.path.join(GIN_DIR, "dr_grpo.gin")])
    config = load_config(TINY)
    loss_config = sync_runner._loss_config(config)
    assert (loss_config.agg, loss_config.norm_len) == ("seq-mean-token-sum-norm", 32)
    assert (
        gin_bindings.resolve("group_advantages", estimator="grpo", normalize_std=True)[
            "normalize_std"
        ]
        is False
    )
    gin_bindings.clear()
    gin_bindings.parse([], ["GRPOLossConfig.agg = 'token-mean'"])
    config = load_config(TINY, {"loss.agg": "seq-mean-token-sum-norm"})  # config gives norm_len=8
    assert sync_runner._loss_config(config).norm_len is None


def test_reward_and_optimizer_bindings_reach_the_built_parts():
    gin_bindings.parse([os.path.join(GIN_DIR, "format_bonus.gin")])
    runner = build_rewards(load_config(TINY))
    assert runner.weights == {"task": 1.0, "format": 0.1}
    assert runner.timeout_s == 2.0
    long_answer = "The answer is " + "very " * 10 + "7."
    assert runner.functions["format"]("p", "The answer is 7.", None) == 1.0
    assert runner.functions["format"]("p", long_answer, None) == 0.0  # max_chars = 40 applied
    gin_bindings.clear()
    gin_bindings.parse([], ["format_reward.max_chars = 5"])
    runner = build_rewards(load_config(TINY, {"rewards.format_weight": 0.5}))
    assert runner.functions["format"]("p", "The answer is 7.", None) == 0.0
    # make_optimizer: b2 reaches optax (the second moment after one step shows it).
    import jax.numpy as jnp

    gin_bindings.parse([], ["make_optimizer.b2 = 0.5", "make_optimizer.max_grad_norm = None"])
    tx = gin_bindings.configured("make_optimizer", learning_rate=1e-3, b2=0.99, max_grad_norm=1.0)
    params = {"w": jnp.ones(2)}
    _, state = tx.update({"w": jnp.full(2, 2.0)}, tx.init(params), params)
    np.testing.assert_allclose(state[0].nu["w"], (1 - 0.5) * 4.0)


@pytest.mark.parametrize(
    "binding, fragment",
    [
        ("GRPOLosConfig.clip_low = 0.1", "Did you mean GRPOLossConfig?"),
        ("GRPOLossConfig.clip_lo = 0.1", "doesn't have a parameter named 'clip_lo'"),
        ("GRPOLossConfig.temperature = 1.0", "config.rollout.temperature"),
        ("group_advantages.group_size = 3", "allowlist"),
        ("GRPOLossConfig.clip_low = ", "Unable to parse"),
    ],
)
def test_bad_bindings_fail_with_a_clear_message(binding, fragment):
    with pytest.raises(gin_bindings.GinConfigError, match="^gin: ") as info:
        gin_bindings.parse([], [binding])
    assert fragment in str(info.value)
    assert "Configurables: GRPOLossConfig" in str(info.value)


def test_bad_values_fail_when_the_runner_resolves_them():
    gin_bindings.parse([], ["group_advantages.estimator = 'ppo'"])
    with pytest.raises(
        gin_bindings.GinConfigError, match=r"estimator='ppo' must be one of \('grpo', 'rloo'\)"
    ):
        gin_bindings.resolve("group_advantages", estimator="grpo", normalize_std=True)
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
        "group_advantges.estimator = 'rloo'",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "error: gin: No configurable matching 'group_advantges'" in proc.stderr
    assert "Did you mean group_advantages?" in proc.stderr
    assert not os.path.exists(tmp_path / "w" / "metrics.jsonl")


def test_gin_file_changes_the_clip_range_and_estimator_the_runner_uses(tmp_path, monkeypatch):
    """The done-when check: a gin file changes the clip range and the advantage estimator of a run."""
    used_configs, used_estimators, advantages = [], [], []
    real_loss, real_advantages = sync_runner.grpo_loss, sync_runner.group_advantages

    def spy_loss(model, batch, *, config):
        used_configs.append(config)
        return real_loss(model, batch, config=config)

    def spy_advantages(rewards, group, **kwargs):
        used_estimators.append(kwargs)
        out = real_advantages(rewards, group, **kwargs)
        advantages.append((np.asarray(rewards), out))
        return out

    monkeypatch.setattr(sync_runner, "grpo_loss", spy_loss)
    monkeypatch.setattr(sync_runner, "group_advantages", spy_advantages)
    gin_bindings.parse([os.path.join(GIN_DIR, "clip_rloo.gin")])
    config = load_config(TINY, {"train.num_steps": 1, "eval.before": False, "eval.after": False})
    assert (config.loss.clip_low, config.loss.clip_high, config.loss.advantage) == (
        0.2,
        0.28,
        "grpo",
    )
    train(config, str(tmp_path), progress=False)

    assert used_configs and {(c.clip_low, c.clip_high) for c in used_configs} == {(0.1, 0.15)}
    assert used_estimators == [{"estimator": "rloo", "normalize_std": True}]
    rewards, adv = advantages[0]
    expected = real_advantages(rewards, config.rollout.group_size, estimator="rloo")
    np.testing.assert_array_equal(adv, expected)
    assert [r["step"] for r in read_metrics(str(tmp_path))] == [1]
