"""The offline stages, and the registry that picks a config's stage: online RL or one of them.

A config's `stage` (`registry.STAGES`) names what runs: "rl" (the default) is the online loop of
`jaxrl_llm.runners`; the others train on a fixed data set, never through the online loop's
collectors and schedules: "sft" (`sft`), "reward_model" (`reward_model`), "process_reward_model"
(`process_reward_model`), "preference" (offline DPO and its family, `preference`),
"self_training" (ReST-EM, RAFT, `self_training`) and "pipeline" (SFT -> reward model -> RL,
`pipeline`). The supervised ones share one skeleton (`supervised.SupervisedStage`), their data
(`data`), parts (`parts`), and the sampling of the policy's own samples for labels (`sampling`,
kept on disk by `sample_journal`).

`load_config` reads a config file and validates it for its stage; `validate_stage` and
`run_stage` dispatch on the stage.

    config = load_config("experiments/configs/sft_tiny.py", {"train.num_steps": 2})
    summary = run_stage(config, "runs/sft")
"""

from jaxrl_llm.stages.registry import STAGES, load_config, run_stage, stage_of, validate_stage

__all__ = ["STAGES", "load_config", "run_stage", "stage_of", "validate_stage"]
