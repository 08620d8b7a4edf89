"""Runners own the loop and nothing algorithm-specific; hooks do the side work.

`train(config, workdir)` is the online RL runner (`online`): a collector (`SingleTurnSampler`, or
`EpisodePlayer` for `config.env`) and a schedule (`SyncSchedule`, or `AsyncSchedule` for
`config.async_rl`: a generator beside the learner, samples at most `max_staleness` weight versions
old) put together around `OnlineRun`'s collect -> process -> update, for whichever `Algorithm` the
config names (or one passed in). `restore_policy(workdir)` gives a finished run's policy back
(its config, model and checkpointed weights).

Offline stages (SFT, reward models, offline preference, self-training) and the registry that
picks a config's stage live in `jaxrl_llm.stages`, which imports from here, never the other way.
"""

from jaxrl_llm.runners.collectors import Collector, Generated, rollout_seed
from jaxrl_llm.runners.episode_player import EpisodePlayer
from jaxrl_llm.runners.evaluation import eval_settings, greedy_accuracy
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
from jaxrl_llm.runners.online import build_run, train
from jaxrl_llm.runners.online_async import AsyncSchedule
from jaxrl_llm.runners.online_run import OnlineRun
from jaxrl_llm.runners.online_sync import Schedule, SyncSchedule
from jaxrl_llm.runners.pipeline import PipelineError
from jaxrl_llm.runners.restore import RestoredPolicy, load_run_config, restore_policy
from jaxrl_llm.runners.sampler import SingleTurnSampler

__all__ = [
    "TIME_KEYS",
    "is_process_dependent",
    "AsyncSchedule",
    "CheckpointHook",
    "Collector",
    "EpisodePlayer",
    "EvaluationHook",
    "Generated",
    "Hook",
    "MetricsHook",
    "NonFiniteGuard",
    "NonFiniteLossError",
    "OnlineRun",
    "PipelineError",
    "ProgressHook",
    "RestoredPolicy",
    "Schedule",
    "SingleTurnSampler",
    "StepRecord",
    "SyncSchedule",
    "build_run",
    "default_hooks",
    "eval_settings",
    "greedy_accuracy",
    "load_run_config",
    "restore_policy",
    "rollout_seed",
    "train",
]
