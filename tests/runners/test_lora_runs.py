"""RL with LoRA adapters end to end on the tiny model, by the config switch alone: GRPO with a
KL reference resumes exactly from an adapters-only checkpoint and evaluates from it; PPO (critic
and reference) runs with the rollout merging the adapters; SFT exports merged weights."""

import jax
import numpy as np
import pytest

from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import TIME_KEYS, train
from jaxrl_llm.runners.restore import restore_policy
from jaxrl_llm.stages import load_config, run_stage

LORA = {"model.lora.rank": 4, "model.lora.alpha": 8.0, "optimizer.learning_rate": 1e-3}


def _config(path, steps, **overrides):
    return load_config(
        path,
        {
            "train.num_steps": steps,
            "train.checkpoint_every": 1,
            "eval.before": False,
            "eval.after": False,
            **LORA,
            **overrides,
        },
    )


def _rows(workdir):
    return {
        r["step"]: {k: v for k, v in r.items() if k not in TIME_KEYS}
        for r in read_metrics(str(workdir))
        if "train/rows" in r
    }


@pytest.mark.slow  # default coverage: models/test_lora.py::test_orbax_checkpoint_holds_the_adapters_alone
def test_lora_grpo_resumes_from_adapter_checkpoints(tmp_path, text_reward):
    tiny = "experiments/configs/grpo_tiny.py"
    kl = {"loss.kl_beta": 0.1}
    train(_config(tiny, 3, **kl), str(tmp_path / "a"), progress=False)
    train(_config(tiny, 2, **kl), str(tmp_path / "b"), progress=False)
    train(_config(tiny, 3, **kl), str(tmp_path / "b"), progress=False)
    want, got = _rows(tmp_path / "a"), _rows(tmp_path / "b")
    assert sorted(got) == sorted(want) == [1, 2, 3]
    assert want[3]["train/kl_ref"] > 0  # the adapters moved the policy off its base
    for step in want:
        for key in want[step]:
            np.testing.assert_allclose(got[step][key], want[step][key], rtol=1e-5, err_msg=key)
    payload = want[1]["sync/payload_bytes"]
    restored = restore_policy(str(tmp_path / "a"))
    base = sum(x.nbytes for x in jax.tree.leaves(restored.params))
    assert 0 < payload < base / 10  # only the adapters travel to the rollout


@pytest.mark.slow  # the default target keeps its 20 minutes; GRPO's LoRA run above stays there
def test_lora_ppo_with_the_rollout_merging_adapters(tmp_path, text_reward):
    config = _config(
        "experiments/configs/ppo_tiny.py", 2, **{"model.lora.rollout": "merge", "eval.after": True}
    )
    summary = train(config, str(tmp_path), progress=False)
    rows = _rows(tmp_path)
    assert summary["steps"] == 2 and "critic/loss" in rows[2]
    assert np.isfinite(rows[2]["train/loss"]) and rows[2]["train/grad_norm"] > 0


@pytest.mark.slow
def test_lora_sft_exports_a_merged_model(tmp_path):
    from jaxrl_llm.models import from_pretrained
    from jaxrl_llm.models.lora import has_adapters

    config = _config("experiments/configs/sft_tiny.py", 2)
    summary = run_stage(config, str(tmp_path), progress=False)
    assert summary["after"]["eval/loss"] < summary["before"]["eval/loss"]
    model, _ = from_pretrained(str(tmp_path / "model"))
    assert not has_adapters(model)
