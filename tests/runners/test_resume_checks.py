"""Resuming a workdir: refused when the checkpoints belong to a run with other training settings
(a new default recipe, another rate or seed), allowed for the fields that do not shape training."""

import json
import os

import pytest

from jaxrl_llm.config import apply_overrides, config_for
from jaxrl_llm.recipes import apply_recipe
from jaxrl_llm.runners.lifecycle import FREE_ON_RESUME, changed_fields, check_resumable


def _workdir_with_checkpoints(tmp_path, config) -> str:
    workdir = str(tmp_path)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort())
    os.makedirs(os.path.join(workdir, "checkpoints", "5"))
    return workdir


def test_a_plain_run_is_not_resumed_under_the_stable_recipe(tmp_path):
    # what `bash scripts/main.sh` met after the default recipe changed: same task and model
    workdir = _workdir_with_checkpoints(tmp_path, config_for("grpo"))
    stable = apply_recipe(config_for("grpo"), "stable")
    with pytest.raises(ValueError) as error:
        check_resumable(stable, workdir)
    message = str(error.value)
    assert "other training settings" in message
    assert "stabilise.dynamic_sampling: False -> True" in message
    assert "rollout.temperature: 0.7 -> 1.0" in message
    assert "--config.train.resume_with_changes=true" in message
    assert "another --workdir" in message


def test_resume_with_changes_continues_the_run_on_purpose(tmp_path):
    workdir = _workdir_with_checkpoints(tmp_path, config_for("grpo"))
    lower_rate = apply_overrides(
        config_for("grpo"),
        {"optimizer.learning_rate": 1e-6, "train.resume_with_changes": True},
    )
    check_resumable(lower_rate, workdir)
    other_task = apply_overrides(lower_rate, {"task.name": "gcd"})
    with pytest.raises(ValueError, match="with task chain_sum"):  # never another task
        check_resumable(other_task, workdir)


@pytest.mark.parametrize(
    "overrides",
    [
        {"optimizer.learning_rate": 1e-6},
        {"seed": 1},
        {"rollout.group_size": 8},
        {"loss.kl_beta": 0.1},
    ],
)
def test_a_field_that_shapes_training_is_named(tmp_path, overrides):
    workdir = _workdir_with_checkpoints(tmp_path, config_for("grpo"))
    (field,) = overrides
    with pytest.raises(ValueError, match=rf"other training settings: {field}: "):
        check_resumable(apply_overrides(config_for("grpo"), overrides), workdir)


def test_evaluation_cadence_and_length_may_change(tmp_path):
    workdir = _workdir_with_checkpoints(tmp_path, config_for("grpo"))
    longer = apply_overrides(
        config_for("grpo"),
        {
            "train.num_steps": 60,
            "train.checkpoint_every": 10,
            "train.keep_checkpoints": 1,
            "eval.every": 5,
            "eval.tasks": "gcd",
            "rollout.decode_batch": 16,
        },
    )
    check_resumable(longer, workdir)


def test_a_field_the_saved_config_lacks_is_not_compared():
    saved = json.loads(config_for("grpo").to_json_best_effort())
    del saved["stabilise"]  # written before the section existed
    current = json.loads(apply_recipe(config_for("grpo"), "stable").to_json_best_effort())
    changed = changed_fields(saved, current)
    assert changed and not any(field.startswith("stabilise.") for field in changed)
    assert "rollout.temperature" in changed


def test_every_free_field_exists():
    config = config_for("grpo")
    for free in FREE_ON_RESUME:
        if free.startswith("*"):  # a stage section's field: sft.eval_every, ...
            continue
        node = config
        for part in free.removesuffix(".").split("."):
            assert part in node, free
            node = node[part]


def test_a_supervised_stage_checks_its_workdir_too(tmp_path):
    from jaxrl_llm.stages.sft import sft_config
    from jaxrl_llm.stages.supervised import write_config

    workdir = _workdir_with_checkpoints(tmp_path, sft_config())
    write_config(apply_overrides(sft_config(), {"sft.eval_every": 5}), workdir)  # cadence: free
    with pytest.raises(ValueError, match=r"optimizer.learning_rate: 1e-05 -> 0.0001"):
        write_config(apply_overrides(sft_config(), {"optimizer.learning_rate": 1e-4}), workdir)
    saved = json.load(open(os.path.join(workdir, "config.json")))
    assert saved["optimizer"]["learning_rate"] == 1e-5 and saved["sft"]["eval_every"] == 5
