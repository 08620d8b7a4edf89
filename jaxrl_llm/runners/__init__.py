"""Runners own the loop and nothing algorithm-specific; hooks do the side work.

`train(config, workdir)` is the synchronous online runner (`online_sync`): collect -> process ->
update for whichever `Algorithm` the config names (or one passed in). With
`config.async_rl.enabled` it runs the asynchronous runner (`online_async`): a generator thread and
the learner at once, samples at most `max_staleness` weight versions old. `restore_policy(workdir)`
gives a finished run's policy back (its config, model and checkpointed weights).

A config's `stage` picks the stage of the three-stage pipeline (`runners.stages`): RL (the
default), "sft" (`runners.sft`) or "reward_model" (`runners.reward_model`); `validate_stage` and
`run_stage` dispatch on it.
"""

from jaxrl_llm.runners.evaluation import greedy_accuracy
from jaxrl_llm.runners.hooks import (
    CheckpointHook,
    EvaluationHook,
    Hook,
    MetricsHook,
    NonFiniteGuard,
    NonFiniteLossError,
    ProgressHook,
    StepRecord,
    default_hooks,
)
from jaxrl_llm.runners.lifecycle import TIME_KEYS, is_process_dependent
from jaxrl_llm.runners.online_async import AsyncRun
from jaxrl_llm.runners.online_sync import OnlineRun, rollout_seed, train
from jaxrl_llm.runners.pipeline import PipelineError
from jaxrl_llm.runners.restore import RestoredPolicy, load_run_config, restore_policy
from jaxrl_llm.runners.stages import run_stage, validate_stage

__all__ = [
    "TIME_KEYS",
    "is_process_dependent",
    "AsyncRun",
    "CheckpointHook",
    "EvaluationHook",
    "Hook",
    "MetricsHook",
    "NonFiniteGuard",
    "NonFiniteLossError",
    "OnlineRun",
    "PipelineError",
    "ProgressHook",
    "RestoredPolicy",
    "StepRecord",
    "default_hooks",
    "greedy_accuracy",
    "load_run_config",
    "restore_policy",
    "rollout_seed",
    "run_stage",
    "train",
    "validate_stage",
]
