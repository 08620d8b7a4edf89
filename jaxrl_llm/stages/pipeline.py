"""The three-stage pipeline from one command: SFT -> reward model -> RL against it.

    python -m jaxrl_llm.main --config experiments/configs/pipeline_smollm2.py --workdir runs/pipe

InstructGPT / DeepSpeed-Chat's order ("Training language models to follow instructions with
human feedback", 2203.02155). A pipeline config holds one full config per stage
(`config.sft`, `config.reward_model`, `config.rl`; each overridable on the command line, e.g.
`--config.rl.train.num_steps=20`) and the stages to run (`config.stages`). Each stage runs in
`<workdir>/<stage>`; its output feeds the next:

  sft           writes <workdir>/sft/model          -> the reward model's trunk and the policy
  reward_model  writes <workdir>/reward_model/reward_model -> the RL stage's `rewards.model`
  rl            the policy trained against it (`rewards.task_weight` sets how much of the
                verifier is mixed in; `reward/accuracy` always reports the verifier)

A stage whose `summary.json` exists is done and skipped, so rerunning the command resumes at
the stage where it stopped (which itself resumes from its newest checkpoint).
"""

from __future__ import annotations

import json
import os

import ml_collections

from jaxrl_llm.stages.registry import run_stage, validate_stage
from jaxrl_llm.stages.supervised import write_config

PIPELINE_STAGES = ("sft", "reward_model", "rl")


def pipeline_config(sft, reward_model, rl) -> ml_collections.ConfigDict:
    """A pipeline config of three stage configs (e.g. `sft_config()`, `rm_config()`,
    `config_for("ppo")`), unlocked copies."""
    c = ml_collections.ConfigDict()
    c.stage = "pipeline"
    c.stages = PIPELINE_STAGES
    for name, stage in zip(PIPELINE_STAGES, (sft, reward_model, rl), strict=True):
        copy = ml_collections.ConfigDict(stage.to_dict())
        c[name] = copy
    c.rl.stage = "rl"
    return c


def validate_pipeline_config(config) -> None:
    """Each stage's own validation, and `config.stages` an ordered subset of the stages."""
    stages = tuple(config.stages)
    if not stages or any(s not in PIPELINE_STAGES for s in stages):
        raise ValueError(
            f"config.stages={stages!r} must be a non-empty subset of {PIPELINE_STAGES}."
        )
    if list(stages) != sorted(stages, key=PIPELINE_STAGES.index):
        raise ValueError(f"config.stages={stages!r} must keep the order {PIPELINE_STAGES}.")
    for name in stages:
        try:
            validate_stage(config[name])
        except ValueError as e:
            raise ValueError(f"config.{name}: {e}") from e


def _use_policy(stage_config, model_dir: str) -> None:
    with stage_config.unlocked():
        stage_config.model.name = model_dir
        stage_config.model.init = "pretrained"


def run_pipeline(config, workdir: str, *, progress: bool = True) -> dict:
    """Runs the pipeline's stages in order (see the module docstring) from a config
    `validate_pipeline_config` passed (`jaxrl_llm.stages.load_config` validates); returns their
    summaries."""
    write_config(config, workdir)
    summaries = {}
    for name in config.stages:
        stage_config = ml_collections.ConfigDict(config[name].to_dict())
        sft_model = os.path.join(workdir, "sft", "model")
        reward_model = os.path.join(workdir, "reward_model", "reward_model")
        if name != "sft" and "sft" in config.stages:
            _use_policy(stage_config, sft_model)
        if name == "rl" and "reward_model" in config.stages:
            with stage_config.unlocked():
                stage_config.rewards.model = reward_model
        stage_dir = os.path.join(workdir, name)
        done = os.path.join(stage_dir, "summary.json")
        if os.path.isfile(done):
            print(f"[jaxrl_llm] pipeline: {name} is done ({done}); skipping it")
            with open(done) as f:
                summaries[name] = json.load(f)
            continue
        print(f"[jaxrl_llm] pipeline: running {name} in {stage_dir}")
        summaries[name] = run_stage(stage_config, stage_dir, progress=progress)
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump({"stages": list(config.stages), **summaries}, f, indent=2, default=str)
    return summaries
