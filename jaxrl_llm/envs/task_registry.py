"""A small name -> factory registry of episode tasks (`config.env.name`); no hub lists them.

Each task module under `jaxrl_llm/envs/tasks/` calls `register` once, at import:

  make(config)      -> `EpisodeTask`: the task's examples, environment and demonstrations
  own_data          True when its examples do not come from `config.task` (reasoning-gym), so
                    the run config's task section is not checked or used for it
  validate(config)  -> None or ValueError naming the `config.env` field and the fix

`get(name)` imports `jaxrl_llm.envs.tasks.<name>` on first use and `names()` imports every
module of that folder, so a new task is one new file there (plus its config and tests):
nothing else lists it. Tasks defined elsewhere (a notebook, a research repo) call `register`
themselves.
"""

from __future__ import annotations

import os
import pkgutil
from collections.abc import Callable
from typing import NamedTuple

import ml_collections

from jaxrl_llm.envs.episode_task import EpisodeTask
from jaxrl_llm.name_registry import NameRegistry

__all__ = ["TaskSpec", "episode_task", "get", "has_own_data", "names", "register"]

# Where the built-in tasks live, one module each (`jaxrl_llm.envs.tasks.<name>`).
_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks")


class TaskSpec(NamedTuple):
    """A registered episode task: its factory, where its examples come from, its checks."""

    name: str
    make: Callable[[ml_collections.ConfigDict], EpisodeTask]
    own_data: bool
    validate: Callable[[ml_collections.ConfigDict], None]


_REGISTRY: NameRegistry[TaskSpec] = NameRegistry(
    "episode task (or '' for single-turn rollouts)",
    "config.env.name",
    "jaxrl_llm.envs.tasks",
    modules=lambda: [module.name for module in pkgutil.iter_modules([_FOLDER])],
)


def _no_checks(config) -> None:
    del config


def register(
    name: str,
    *,
    make: Callable[[ml_collections.ConfigDict], EpisodeTask],
    own_data: bool = False,
    validate: Callable[[ml_collections.ConfigDict], None] = _no_checks,
) -> TaskSpec:
    """Registers an episode task under `name` (again with the same name replaces it).

    Example:
      >>> register("echo", make=lambda config: EpisodeTask("echo", echo_examples, EchoEnv),
      ...          own_data=True)
    """
    return _REGISTRY.register(name, TaskSpec(name, make, own_data, validate))


# `names()`: the registered names, every module of `jaxrl_llm/envs/tasks/` imported first;
# `get(name)`: the spec, importing `jaxrl_llm.envs.tasks.<name>` if needed (a KeyError lists
# the registered names).
names = _REGISTRY.names
get = _REGISTRY.get


def has_own_data(name: str) -> bool:
    """Whether episode task `name` makes its own examples (False for "" and unknown names:
    their examples, if any, come from `config.task`)."""
    spec = _REGISTRY.find(name)
    return spec is not None and spec.own_data


def episode_task(config: ml_collections.ConfigDict) -> EpisodeTask:
    """The `EpisodeTask` of `config.env.name`.

    Raises:
      KeyError: an unregistered name (`get`).
    """
    return get(config.env.name).make(config)
