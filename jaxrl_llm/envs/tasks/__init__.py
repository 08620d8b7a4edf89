"""The episode tasks a run config can name (`config.env.name`), one module each, found by name.

  "calculator"  reasoning-gym products (`config.task`, e.g. 3- and 4-digit factors) answered
                with a calculator tool (`ToolEnv`); success = the final answer is right.
  "multi_if"    generated Multi-IF conversations (`MultiIFEnv`); reward per turn = the fraction
                of its instructions followed; success = every instruction of every turn.

A new task is one module here that calls `jaxrl_llm.envs.task_registry.register` (see that
module and docs/extending.md); `episode_task(config)` builds the `EpisodeTask` of
`config.env.name`.
"""

from jaxrl_llm.envs.episode_task import Demonstration, EpisodeTask, episode_metrics
from jaxrl_llm.envs.task_registry import TaskSpec, episode_task, get, has_own_data, names, register

__all__ = [
    "Demonstration",
    "EpisodeTask",
    "TaskSpec",
    "episode_metrics",
    "episode_task",
    "get",
    "has_own_data",
    "names",
    "register",
]
