"""PPO end to end on the tiny model: the critic trains beside the actor, its state (and a moving
reference's) is checkpointed, a resumed run repeats the uninterrupted one, critic warm-up
freezes the actor, and value pretraining runs before the first step without changing its
samples."""

import numpy as np
import pytest

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import TIME_KEYS, train
from jaxrl_llm.stages import load_config

TINY_PPO = "experiments/configs/ppo_tiny.py"


def _config(steps, **overrides):
    return load_config(
        TINY_PPO,
        {
            "train.num_steps": steps,
            "train.checkpoint_every": 1,
            "eval.before": False,
            "eval.after": False,
            **overrides,
        },
    )


def _rows(workdir):
    return {
        r["step"]: {k: v for k, v in r.items() if k not in TIME_KEYS}
        for r in read_metrics(str(workdir))
    }


@pytest.mark.slow  # default coverage: faults/test_faults.py::test_corrupt_newest_checkpoint_is_moved_aside_and_the_run_finishes[ppo]
def test_ppo_resume_repeats_the_uninterrupted_run(tmp_path):
    # the reference follows the policy: its moved weights are checkpointed too
    shaping = {"loss.kl_target": 0.01, "reference.ema_decay": 0.5}
    summary = train(_config(3, **shaping), str(tmp_path / "a"), progress=False)
    assert summary["algorithm"] == "ppo" and summary["steps"] == 3
    train(_config(2, **shaping), str(tmp_path / "b"), progress=False)
    train(_config(3, **shaping), str(tmp_path / "b"), progress=False)
    expected, got = _rows(tmp_path / "a"), _rows(tmp_path / "b")
    assert sorted(got) == sorted(expected) == [1, 2, 3]
    for key in ("critic/loss", "critic/grad_norm", "train/grad_norm", "algo/kl_coef", "algo/kl"):
        np.testing.assert_allclose(
            [got[s][key] for s in (1, 2, 3)],
            [expected[s][key] for s in (1, 2, 3)],
            rtol=1e-5,
            atol=1e-7,
            err_msg=key,
        )
    # The adaptive controller moved beta, and the resumed run restored it from the checkpoint.
    assert expected[3]["algo/kl_coef"] != expected[1]["algo/kl_coef"]
    assert all(expected[s]["critic/grad_norm"] > 0 for s in (1, 2, 3))


def test_critic_warmup_leaves_the_actor_untouched(tmp_path):
    train(_config(2, **{"critic.warmup_rl_steps": 1}), str(tmp_path), progress=False)
    rows = _rows(tmp_path)
    assert "train/loss" not in rows[1] and "critic/loss" in rows[1]
    assert "train/loss" in rows[2]
    assert rows[2]["train/learning_step"] == 1.5  # two minibatches of step 2 only


def test_value_pretraining_then_rl_with_an_average_reference_and_micro_batches(tmp_path):
    """Xu et al.'s and VC-PPO's levers at once: the critic alone trains on two batches of the
    initial policy's rollouts before step 1, which then samples what it would without them."""
    levers = {"reference.ema_decay": 0.9, "train.grad_accumulation": 2, "loss.critic_lam": 1.0}
    summary = train(
        _config(1, **levers, **{"critic.pretrain_steps": 2}), str(tmp_path / "a"), progress=False
    )
    pretrain = summary["critic_pretrain"]
    assert pretrain["steps"] == 2 and len(pretrain["explained_variance"]) == 2
    assert all(np.isfinite(pretrain["loss"]))
    rows = _rows(tmp_path / "a")
    # 2 pretraining steps of 2 minibatches, then step 1's two updates: critic updates 5 and 6;
    # the actor's first two
    assert rows[1]["critic/learning_step"] == 5.5 and rows[1]["train/learning_step"] == 1.5
    train(_config(1, **levers), str(tmp_path / "b"), progress=False)
    plain = _rows(tmp_path / "b")[1]
    for key in ("reward/mean", "completion/length", "algo/kl"):  # same prompts and samples
        assert rows[1][key] == plain[key], key
    assert rows[1]["critic/loss"] != plain["critic/loss"]  # another critic
