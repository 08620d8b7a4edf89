"""jaxrl_llm.recipes and the main job's config that applies one."""

import json
import os

import pytest

from jaxrl_llm.config import config_for, grpo_config, validate_config
from jaxrl_llm.config_files import load_module
from jaxrl_llm.recipes import RECIPES, STABLE_GRPO, apply_recipe
from jaxrl_llm.stages import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN_JOB = os.path.join(ROOT, "experiments/configs/grpo_smollm2.py")


def _as_json(config) -> dict:
    return json.loads(config.to_json_best_effort(sort_keys=True))


def test_stable_recipe_is_the_stabiliser_sweeps_eighth_setting():
    """The recipe holds exactly the fields of the setting whose runs chose it, so its evidence
    (docs/recipe.md) is evidence for it."""
    sweep = load_module(os.path.join(ROOT, "experiments/sweeps/stabilisers.py"), kind="sweep")
    eighth = sweep.SETTINGS[7]
    assert dict(STABLE_GRPO) == eighth


def test_main_job_is_grpo_with_the_stable_recipe_and_plain_is_the_library_default():
    main_job = load_config(MAIN_JOB)
    assert main_job.stabilise.dynamic_sampling and main_job.loss.kl_beta == 0.04
    expected = grpo_config()
    apply_recipe(expected, "stable")
    assert _as_json(main_job) == _as_json(expected)
    assert _as_json(load_config(MAIN_JOB + ":plain")) == _as_json(grpo_config())


def test_every_recipe_validates_on_grpo():
    for name in RECIPES:
        validate_config(apply_recipe(grpo_config(), name))


def test_recipe_errors_name_the_recipe_or_field():
    with pytest.raises(ValueError, match=r"Unknown recipe 'stabel': choose one of \['plain'"):
        apply_recipe(grpo_config(), "stabel")
    # PPO has no groups: the recipe's dynamic sampling is refused by name
    with pytest.raises(ValueError, match=r"dynamic_sampling=True needs groups"):
        validate_config(apply_recipe(config_for("ppo"), "stable"))
