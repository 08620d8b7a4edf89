"""Checkpoints (orbax) round trip and fall back past a corrupt one; configs reject bad keys."""

import os
import types

import jax
import numpy as np
import pytest

from jaxrl_llm import checkpoint
from jaxrl_llm.checkpoint import (
    Checkpointer,
    CheckpointSpaceError,
    abstract_like,
    checkpoint_bytes,
    saves_left,
)
from jaxrl_llm.config import apply_overrides, grpo_config, validate_config
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.stages import load_config
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


def test_saves_left_counts_every_multiple_and_the_last_step():
    assert saves_left(0, num_steps=30, every=10) == 3  # 10, 20, 30
    assert saves_left(3, num_steps=7, every=5) == 2  # 5 and the last, 7
    assert saves_left(5, num_steps=7, every=5) == 1  # 7
    assert saves_left(0, num_steps=4, every=1) == 4
    assert saves_left(30, num_steps=30, every=10) == 0  # finished


def test_ensure_space_counts_the_checkpoints_on_disk_at_once(tmp_path, monkeypatch):
    state = _state(1)
    size = checkpoint_bytes(state)
    assert size == sum(np.asarray(x).nbytes for x in jax.tree.leaves(state)) > 0
    assert checkpoint_bytes(abstract_like(state)) == size  # shapes suffice
    free = {"bytes": 0}
    monkeypatch.setattr(
        checkpoint.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=free["bytes"])
    )
    ckpt = Checkpointer(str(tmp_path / "ckpt"), max_to_keep=2)
    ckpt.ensure_space(state, saves=0)  # nothing to write: no figure needed
    # None on disk, 5 saves, 2 kept: the third is written before the first goes, so 3 at once.
    free["bytes"] = 3 * size
    ckpt.ensure_space(state, saves=5)
    free["bytes"] = 3 * size - 1
    with pytest.raises(CheckpointSpaceError, match=r"keep_checkpoints=2: .* up to 3 on disk"):
        ckpt.ensure_space(state, saves=5)
    free["bytes"] = size
    ckpt.ensure_space(state, saves=1)
    monkeypatch.undo()
    ckpt.save(1, state, {"step": 1})
    ckpt.save(2, state, {"step": 2})
    monkeypatch.setattr(
        checkpoint.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=free["bytes"])
    )
    # Two on disk (the most kept): each later save adds one before one goes, one more at once.
    free["bytes"] = size
    ckpt.ensure_space(state, saves=3)
    free["bytes"] = size - 1
    with pytest.raises(CheckpointSpaceError, match="lower config.train.keep_checkpoints"):
        ckpt.ensure_space(state, saves=3)
    ckpt.close()


def test_keep_checkpoints_must_be_positive():
    config = apply_overrides(grpo_config(), {"train.keep_checkpoints": 0})
    with pytest.raises(ValueError, match=r"config.train.keep_checkpoints=0 must be a positive"):
        validate_config(config)
