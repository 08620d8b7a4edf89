"""The stages a config may name (`config.stage`): RL (the default), "sft", "reward_model",
"process_reward_model", "pipeline" (SFT -> reward model -> RL, `runners.pipeline_stages`),
"self_training" (ReST-EM, RAFT) and "preference" (offline DPO, KTO, SimPO, ORPO).

InstructGPT's three-stage pipeline (2203.02155): supervised fine-tuning, a reward model from
comparisons, RL against it. Each stage is a `(validate, run)` pair, imported on first use.
"""

from __future__ import annotations

import importlib

# stage -> (module, validate function, run function); RL is `online_sync.train`.
STAGES = {
    "rl": ("jaxrl_llm.runners.online_sync", None, "train"),
    "sft": ("jaxrl_llm.runners.sft", "validate_sft_config", "train_sft"),
    "reward_model": ("jaxrl_llm.runners.reward_model", "validate_rm_config", "train_reward_model"),
    "process_reward_model": (
        "jaxrl_llm.runners.process_reward_model",
        "validate_prm_config",
        "train_process_reward_model",
    ),
    "pipeline": ("jaxrl_llm.runners.pipeline_stages", "validate_pipeline_config", "run_pipeline"),
    "self_training": (
        "jaxrl_llm.runners.self_training",
        "validate_self_training_config",
        "train_self_training",
    ),
    "preference": (
        "jaxrl_llm.runners.preference",
        "validate_preference_config",
        "train_preference",
    ),
}


def stage_of(config) -> str:
    """The config's stage; raises ValueError naming `config.stage` if unknown."""
    stage = config.get("stage", "rl")
    if stage not in STAGES:
        raise ValueError(f"config.stage={stage!r} must be one of {tuple(STAGES)}.")
    return stage


def validate_stage(config) -> None:
    """Validates a config of any stage (`jaxrl_llm.config.validate_config` for RL)."""
    from jaxrl_llm.config import validate_config, validate_precision

    module, validate, _ = STAGES[stage_of(config)]
    if validate is None:
        return validate_config(config)
    if "model" in config and "optimizer" in config:  # every stage trains with one precision
        validate_precision(config)
    return getattr(importlib.import_module(module), validate)(config)


def run_stage(config, workdir: str, *, progress: bool = True):
    """Runs the stage a config names; returns its summary."""
    module, _, run = STAGES[stage_of(config)]
    return getattr(importlib.import_module(module), run)(config, workdir, progress=progress)
