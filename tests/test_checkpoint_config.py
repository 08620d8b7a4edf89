"""Checkpoints (orbax) round trip and fall back past a corrupt one; configs reject bad keys."""

import os

import jax
import numpy as np
import pytest

from jaxrl_llm.checkpoint import Checkpointer, abstract_like
from jaxrl_llm.config import apply_overrides, grpo_config, validate_config
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.runners.stages import load_config
from jaxrl_llm.training import create_train_state, make_optimizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _state(seed):
    return create_train_state(
        init_model(tiny_config(), seed=seed), make_optimizer(learning_rate=1e-3)
    )[1]


def test_round_trip_and_fallback_past_corrupt_checkpoint(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "ckpt"))
    s1, s2 = _state(1), _state(2)
    ckpt.save(1, s1, {"step": 1, "data": {"position": 8}})
    ckpt.save(2, s2, {"step": 2, "data": {"position": 16}})
    state, meta = ckpt.restore_latest(abstract_like(s1))
    assert meta == {"step": 2, "data": {"position": 16}}
    jax.tree.map(
        np.testing.assert_array_equal, jax.tree.map(np.asarray, state), jax.tree.map(np.asarray, s2)
    )
    # Corrupt every file of step 2: it is moved aside (kept), step 1 is restored.
    for root, _, files in os.walk(tmp_path / "ckpt" / "2"):
        for name in files:
            with open(os.path.join(root, name), "wb") as f:
                f.write(b"\x00garbage")
    state, meta = ckpt.restore_latest(abstract_like(s1))
    assert meta["step"] == 1
    jax.tree.map(
        np.testing.assert_array_equal, jax.tree.map(np.asarray, state), jax.tree.map(np.asarray, s1)
    )
    assert not os.path.exists(tmp_path / "ckpt" / "2")
    [moved] = ckpt.quarantined
    assert moved.step == 2 and os.path.isdir(moved.path)
    assert moved.path.startswith(str(tmp_path / "ckpt_quarantine"))
    ckpt.save(2, s2, {"step": 2, "data": {"position": 16}})  # the same step saves again
    assert ckpt.all_steps() == [1, 2]
    for step in ("1", "2"):
        for root, _, files in os.walk(tmp_path / "ckpt" / step):
            for name in files:
                with open(os.path.join(root, name), "wb") as f:
                    f.write(b"\x00garbage")
    assert ckpt.restore_latest(abstract_like(s1)) is None  # every one broken: start afresh
    assert [q.step for q in ckpt.quarantined] == [2, 2, 1]
    assert len(os.listdir(tmp_path / "ckpt_quarantine")) == 3
    ckpt.close()


def test_empty_directory_restores_nothing(tmp_path):
    assert Checkpointer(str(tmp_path / "none")).restore_latest(abstract_like(_state(0))) is None


def test_unknown_key_lists_close_matches_and_bad_values_name_the_field():
    config = grpo_config()
    with pytest.raises(KeyError, match="rollout.max_new_tokens"):
        apply_overrides(config, {"rollout.max_new_token": 4})
    apply_overrides(config, {"rollout.group_size": 4})
    assert config.rollout.group_size == 4
    config.train.num_minibatches = 3
    with pytest.raises(ValueError, match="num_minibatches=3 must divide"):
        validate_config(config)


def test_load_config_validates(tmp_path):
    with pytest.raises(ValueError, match="temperature=0.0 must be > 0"):
        load_config(
            os.path.join(ROOT, "experiments/configs/grpo_tiny.py"), {"rollout.temperature": 0.0}
        )
    config = load_config(os.path.join(ROOT, "experiments/configs/grpo_smollm2.py"))
    assert config.model.name == "smollm2-135m-instruct"
    with pytest.raises(FileNotFoundError, match="Config file not found"):
        load_config(str(tmp_path / "missing.py"))
