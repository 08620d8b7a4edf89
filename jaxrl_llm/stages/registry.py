"""The stages a config may name (`config.stage`): RL (the default; the online loop of
`jaxrl_llm.runners.online`), "sft", "reward_model", "process_reward_model", "pipeline" (SFT ->
reward model -> RL, `stages.pipeline`), "self_training" (ReST-EM, RAFT) and "preference"
(offline DPO, KTO, SimPO, ORPO).

InstructGPT's three-stage pipeline (2203.02155): supervised fine-tuning, a reward model from
comparisons, RL against it. Each stage is a `(validate, run)` pair, imported on first use.
A config file is read and validated for its stage by `load_config`; `run_stage` runs a config
that validation passed, so the command line checks it once.

    config = load_config("experiments/configs/grpo_tiny.py", {"train.num_steps": 2})
    summary = run_stage(config, "runs/tiny")
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import ml_collections

from jaxrl_llm.config import apply_overrides, validate_config, validate_precision
from jaxrl_llm.config_files import config_from_file

__all__ = ["STAGES", "load_config", "run_stage", "stage_of", "validate_stage"]

# stage -> (module, validate function, what runs a validated config: a function, or a
# `supervised.SupervisedStage` that `run_validated_stage` runs). RL validates with
# `jaxrl_llm.config.validate_config` and runs with `online.run_online` (`train` less the check).
STAGES = {
    "rl": ("jaxrl_llm.runners.online", None, "run_online"),
    "sft": ("jaxrl_llm.stages.sft", "validate_sft_config", "SFT"),
    "reward_model": ("jaxrl_llm.stages.reward_model", "validate_rm_config", "REWARD_MODEL"),
    "process_reward_model": (
        "jaxrl_llm.stages.process_reward_model",
        "validate_prm_config",
        "PROCESS_REWARD_MODEL",
    ),
    "pipeline": ("jaxrl_llm.stages.pipeline", "validate_pipeline_config", "run_pipeline"),
    "self_training": (
        "jaxrl_llm.stages.self_training",
        "validate_self_training_config",
        "run_self_training",
    ),
    "preference": ("jaxrl_llm.stages.preference", "validate_preference_config", "PREFERENCE"),
}


def stage_of(config) -> str:
    """The config's stage; raises ValueError naming `config.stage` if unknown."""
    stage = config.get("stage", "rl")
    if stage not in STAGES:
        raise ValueError(f"config.stage={stage!r} must be one of {tuple(STAGES)}.")
    return stage


def validate_stage(config) -> None:
    """Validates a config of any stage (`jaxrl_llm.config.validate_config` for RL)."""
    module, validate, _ = STAGES[stage_of(config)]
    if validate is None:
        return validate_config(config)
    if "model" in config and "optimizer" in config:  # every stage trains with one precision
        validate_precision(config)
    return getattr(importlib.import_module(module), validate)(config)


def load_config(path: str, overrides: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
    """Loads `get_config()` from a config file ("file.py:arg" calls `get_config("arg")`,
    `jaxrl_llm.config_files`), applies dotted overrides (unknown keys name the closest ones,
    `jaxrl_llm.config.apply_overrides`) and validates it for its stage."""
    config = config_from_file(path)
    apply_overrides(config, overrides or {})
    validate_stage(config)
    return config


def run_stage(config, workdir: str, *, progress: bool = True, reward_fns=None):
    """Runs the stage of a validated config (`load_config`, `validate_stage`) without checking
    it again; its summary. `reward_fns` (Python reward functions, `components.build_rewards`)
    serve the RL stage; another stage refuses them, naming `config.stage`."""
    from jaxrl_llm.stages.supervised import SupervisedStage, run_validated_stage

    stage = stage_of(config)
    module, _, run = STAGES[stage]
    if reward_fns and stage != "rl":
        raise ValueError(
            f"reward_fns score the samples of RL; config.stage={stage!r} trains without them: "
            "leave reward_fns out, or run an RL config."
        )
    target = getattr(importlib.import_module(module), run)
    if isinstance(target, SupervisedStage):
        return run_validated_stage(target, config, workdir, progress=progress)
    if reward_fns:
        return target(config, workdir, progress=progress, reward_fns=reward_fns)
    return target(config, workdir, progress=progress)
