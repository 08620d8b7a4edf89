"""The outcome reward-model stage on the tiny model: pairs made from the policy's samples, a
reward model that learns a preference from a pair file, and errors naming a bad pair line."""

import json
import os
from collections import Counter

import numpy as np
import pytest

from jaxrl_llm.data.pairs import Pair, read_pairs_jsonl, write_pairs_jsonl
from jaxrl_llm.models.heads import load_scalar_model
from jaxrl_llm.stages import load_config, run_stage
from jaxrl_llm.stages.data import padded_width, split_by_group
from jaxrl_llm.stages.reward_model import spread_pairs
from tests.run_helpers import ROOT

RM_TINY = os.path.join(ROOT, "experiments", "configs", "rm_tiny.py")


def _preference_pairs(path, count=40, seed=0):
    """Pairs whose preferred completion ends with "yes" and the other with "no": a preference a
    tiny reward model can learn from the last token it scores."""
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(count):
        prompt = f"<|im_start|>user\nQuestion {i}: {rng.integers(100)}?<|im_end|>\n"
        filler = " ".join(str(x) for x in rng.integers(0, 99, size=rng.integers(1, 6)))
        pairs.append(Pair(prompt, f"{filler} yes", f"{filler} no"))
    write_pairs_jsonl(str(path), pairs)
    return str(path)


def test_the_reward_model_learns_a_preference_and_is_saved(tmp_path):
    pairs = _preference_pairs(tmp_path / "pairs.jsonl")
    config = load_config(RM_TINY, {"rm.pairs": pairs, "train.num_steps": 30})
    summary = run_stage(config, str(tmp_path / "rm"), progress=False)
    assert summary["pairs"]["eval_pairs"] == 8 and summary["pairs"]["train_pairs"] == 32
    assert summary["after"]["eval/pair_accuracy"] >= 0.9  # chance is 0.5
    assert summary["after"]["eval/loss"] < summary["before"]["eval/loss"]
    model = load_scalar_model(summary["reward_model"])
    assert model.trunk.config.num_layers == 2


def test_pairs_are_made_from_the_policys_samples(tmp_path, text_reward):
    """With the tests' odd-length reward, some samples of a prompt "succeed" and some do not:
    each such prompt gives up to `pairs_per_prompt` distinct pairs, correct completion first;
    the held-out pairs' prompts are not among the training pairs' prompts."""
    config = load_config(RM_TINY, {"train.num_steps": 2, "rm.num_prompts": 8})
    summary = run_stage(config, str(tmp_path), progress=False)
    pairs = read_pairs_jsonl(str(tmp_path / "pairs.jsonl"))
    assert summary["pairs"]["pairs"] == len(pairs) >= 2
    for pair in pairs:
        assert len(pair.chosen) % 2 == 1 and len(pair.rejected) % 2 == 0
        assert pair.prompt.startswith("<|im_start|>") and pair.meta["task"]
    per_prompt = Counter(pair.prompt for pair in pairs)
    assert max(per_prompt.values()) <= config.rm.pairs_per_prompt
    assert max(per_prompt.values()) > 1  # several samples right and wrong: several pairs
    assert len({(p.prompt, p.chosen, p.rejected) for p in pairs}) == len(pairs)
    assert summary["pairs"]["eval_prompts"] >= 1
    assert summary["pairs"]["eval_pairs"] + summary["pairs"]["train_pairs"] == len(pairs)


def test_held_out_split_keeps_each_prompt_on_one_side():
    prompts = ["a", "b", "a", "c", "b", "d", "a", "e"]
    held, train = split_by_group(prompts, 0.4, seed=0)
    assert sorted(held + train) == list(range(len(prompts)))
    assert not {prompts[i] for i in held} & {prompts[i] for i in train}
    assert len({prompts[i] for i in held}) == 2  # 40% of 5 distinct prompts
    few = ["a", "b", "a"]
    held, train = split_by_group(few, 0.9, seed=0)  # 90% of 2 keys: still one for training
    assert len({few[i] for i in held}) == 1 and len({few[i] for i in train}) == 1


def test_pairs_spread_over_both_lists_and_rows_pad_to_the_longest():
    assert spread_pairs(1, 3, 4) == [(0, 0), (0, 1), (0, 2)]
    assert spread_pairs(3, 3, 3) == [(0, 0), (0, 1), (1, 0)]
    assert spread_pairs(0, 3, 4) == []
    assert padded_width([17, 3], limit=256) == 32
    assert padded_width([300], limit=256) == 256


def test_a_bad_pair_file_names_the_line_and_field(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"})
        + "\n"
        + json.dumps({"prompt": "p", "chosen": "a"})
        + "\n"
    )
    config = load_config(RM_TINY, {"rm.pairs": str(path)})
    with pytest.raises(ValueError, match=r"pairs\.jsonl:2: field 'rejected' is missing"):
        run_stage(config, str(tmp_path / "rm"), progress=False)


def test_rl_against_an_ensemble_of_reward_models_reports_the_verifier(tmp_path):
    """PPO-family RL with the reward models' score alone (task weight 0): the reward is the
    ensemble's minimum and `reward/accuracy` is still the verifier's."""
    from jaxrl_llm.models.heads import ScalarHeadModel, save_scalar_model
    from jaxrl_llm.runners import train
    from jaxrl_llm.runners.components import load_policy

    rl_tiny = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")
    base = {"train.num_steps": 1, "eval.before": False, "eval.after": False}
    policy, _ = load_policy(load_config(rl_tiny, base))
    paths = []
    for seed in (1, 2):
        path = str(tmp_path / f"rm{seed}")
        save_scalar_model(ScalarHeadModel.from_policy(policy, seed=seed, head_init="normal"), path)
        paths.append(path)
    overrides = {
        **base,
        "rewards.model": ",".join(paths),
        "rewards.ensemble": "min",
        "rewards.task_weight": 0.0,
    }
    train(load_config(rl_tiny, overrides), str(tmp_path / "rl"), progress=False)
    from jaxrl_llm.metrics import read_metrics

    (row,) = [r for r in read_metrics(str(tmp_path / "rl")) if "train/rows" in r]
    assert row["reward/mean"] != 0.0  # the models' scores (the verifier's weight is 0)
    assert row["reward/accuracy"] == 0.0  # a random policy never solves the task
    with pytest.raises(ValueError, match="config.rewards.ensemble='max'"):
        load_config(rl_tiny, {**overrides, "rewards.ensemble": "max"})
