"""Task presets: `--config.task.name=gcd` alone builds the preset's generator; errors name fields."""

import json
import os

import pytest

from jaxrl_llm.config import apply_overrides, config_for, validate_config
from jaxrl_llm.data.presets import (
    PRESETS,
    TaskPreset,
    register_preset,
    resolve_task,
    task_names,
    task_source,
)
from jaxrl_llm.runners.lifecycle import check_resumable


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_source_with_its_kwargs(name):
    source = task_source(name, seed=0, size=3)
    assert source.task == PRESETS[name].task
    assert source.task_kwargs == dict(PRESETS[name].kwargs)
    assert len(source[0].question) > 0 and source[0].answer != ""


def test_gcd_preset_sizes_the_problems():
    source = task_source("gcd", seed=0, size=50)
    numbers = [int(x) for ex in source for x in ex.metadata["metadata"]["numbers"]]
    assert max(numbers) <= 67 and len(numbers) == 100


def test_overrides_replace_preset_fields_and_tasks_without_preset_take_defaults():
    assert resolve_task("gcd", {"max_value": 60})[1]["max_value"] == 60
    assert resolve_task("gcd")[1]["max_value"] == 67
    assert resolve_task("spell_backward") == ("spell_backward", {})
    assert task_names()[: len(PRESETS)] == list(PRESETS)


def test_unknown_task_and_field_are_named_with_close_matches():
    with pytest.raises(ValueError, match=r"config.task.name='gdc'.*'gcd'"):
        resolve_task("gdc")
    with pytest.raises(ValueError, match=r"config.task.kwargs has 'max_vlue'.*'max_value'"):
        resolve_task("gcd", {"max_vlue": 3})


def test_changing_only_the_task_name_gives_a_valid_config():
    config = apply_overrides(config_for("grpo"), {"task.name": "gcd"})
    validate_config(config)
    config.task.kwargs = {"max_value": 90}  # a dict literal on the command line, as well
    validate_config(config)
    config.task.kwargs = {"max_value": 12}  # 78 problems: too few for 200 on the test side
    with pytest.raises(ValueError, match=r"config.task.eval_size=200 .* at most 10,"):
        validate_config(config)
    apply_overrides(config, {"task.kwargs": {"min_vale": 2}})
    with pytest.raises(ValueError, match="min_value"):
        validate_config(config)
    config = apply_overrides(config_for("grpo"), {"eval.tasks": "gcd, lcmm"})
    with pytest.raises(ValueError, match="'lcmm'"):
        validate_config(config)


def test_a_workdir_of_another_task_is_not_resumed(tmp_path):
    config = config_for("grpo")
    workdir = str(tmp_path)
    check_resumable(config, workdir)  # empty directory: fine
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort())
    os.makedirs(os.path.join(workdir, "checkpoints", "5"))
    check_resumable(config, workdir)  # same run: resumes
    other = apply_overrides(config_for("grpo"), {"task.name": "gcd"})
    with pytest.raises(ValueError, match=r"with task chain_sum.*not gcd.*another --workdir"):
        check_resumable(other, workdir)
    saved = json.load(open(os.path.join(workdir, "config.json")))
    assert saved["task"]["name"] == "chain_sum"


def test_a_run_that_spelled_out_the_preset_fields_still_resumes(tmp_path):
    config = config_for("grpo")
    saved = json.loads(config.to_json_best_effort())
    saved["task"]["kwargs"] = dict(PRESETS["chain_sum"].kwargs)  # written before presets
    with open(tmp_path / "config.json", "w") as f:
        json.dump(saved, f)
    os.makedirs(tmp_path / "checkpoints" / "5")
    check_resumable(config, str(tmp_path))


def test_a_preset_registered_outside_is_resolved_like_a_built_in_one():
    kwargs = {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 20}
    register_preset("gcd_to_20", TaskPreset("gcd", kwargs, "gcd of two numbers up to 20"))
    assert PRESETS["gcd_to_20"].kwargs == kwargs and "gcd_to_20" in task_names()
    assert resolve_task("gcd_to_20", {"max_value": 30}) == ("gcd", {**kwargs, "max_value": 30})
    source = task_source("gcd_to_20", seed=0, size=20)
    assert max(int(x) for ex in source for x in ex.metadata["metadata"]["numbers"]) <= 20
    with pytest.raises(ValueError, match=r"'gdc' is not a reasoning-gym task.*'gcd'"):
        register_preset("bad", TaskPreset("gdc", {}, ""))
    with pytest.raises(ValueError, match=r"takes no \['max_vlue'\]"):
        register_preset("bad", TaskPreset("gcd", {"max_vlue": 3}, ""))
