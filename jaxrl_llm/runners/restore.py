"""A trained policy back from a run directory: its config, model, tokenizer and checkpointed
weights, for evaluation (`python -m jaxrl_llm.evaluate --workdir DIR`) or inspection."""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

import ml_collections

from jaxrl_llm import algorithms
from jaxrl_llm.checkpoint import Checkpointer, abstract_like
from jaxrl_llm.config import config_for, validate_config
from jaxrl_llm.runners.components import RunParts, build_parts, build_roles
from jaxrl_llm.runners.online_async import pending_weights_target
from jaxrl_llm.runners.online_run import state_tree

__all__ = ["RestoredPolicy", "load_run_config", "restore_policy"]


class RestoredPolicy(NamedTuple):
    """A run's policy at one checkpoint.

    Attributes:
      config: the run's config (from `workdir/config.json`).
      parts: model, tokenizer, data sources and rewards, built from it; `model` is the graph
        `params` fit (a LoRA run's base model when its rollout merges the adapters).
      params: the actor's weights at `step`, in the decode layout (pass as `params=` to a
        generator or `jaxrl_llm.evals.Evaluator`).
      rewards: the run's reward role (the training reward; held-out accuracy is scored by
        `config.eval.scorer`, `components.build_scorer`).
      step: the checkpoint's RL step.
    """

    config: ml_collections.ConfigDict
    parts: RunParts
    params: Any
    rewards: Any
    step: int


def _set_leaves(config: ml_collections.ConfigDict, saved: dict, prefix: str = "") -> None:
    for key, value in saved.items():
        if key not in config:
            raise ValueError(
                f"config.json has {prefix}{key}, which this version's config lacks; evaluate "
                "with the version that trained the run."
            )
        current = config[key]
        if isinstance(current, ml_collections.ConfigDict) and key != "kwargs":
            _set_leaves(current, value, f"{prefix}{key}.")
        elif isinstance(current, tuple):
            config[key] = tuple(value)
        else:
            config[key] = value


def load_run_config(workdir: str) -> ml_collections.ConfigDict:
    """The validated config a run saved in `workdir/config.json`.

    Raises:
      FileNotFoundError: `workdir` has no config.json (not a run directory).
    """
    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path!r} not found: --workdir must be a run directory written by "
            "`python -m jaxrl_llm.main` (it holds config.json and checkpoints/)."
        )
    with open(path) as f:
        saved = json.load(f)
    config = config_for(saved.get("algorithm", "grpo"))
    _set_leaves(config, saved)
    validate_config(config)
    return config


def restore_policy(workdir: str, step: int | None = None) -> RestoredPolicy:
    """The policy of the run in `workdir` at checkpoint `step` (default: the newest).

    Raises:
      FileNotFoundError: no config.json, or no checkpoint (or not checkpoint `step`).
    """
    config = load_run_config(workdir)
    checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"))
    steps = checkpointer.all_steps()
    if not steps or (step is not None and step not in steps):
        raise FileNotFoundError(
            f"{checkpointer.directory} has no checkpoint"
            f"{'' if step is None else f' {step}'} (it has {steps or 'none'}): train first, "
            "or pick one of those with --step."
        )
    step = steps[-1] if step is None else step
    algorithm = algorithms.make(config)
    parts = build_parts(config)
    roles = build_roles(config, algorithm, parts)
    target = state_tree(roles, algorithm.init())
    pending = pending_weights_target(config, roles)  # deterministic asynchronous runs
    if pending:
        target["pending_weights"] = pending
    tree, _ = checkpointer.restore(step, abstract_like(target))
    checkpointer.close()
    roles.actor.state = tree["actor"]  # a LoRA run's checkpoint holds its adapters alone
    roles.rollout.sync(roles.actor.params)
    parts = parts._replace(model=roles.rollout.decode_model)  # the graph the params fit
    return RestoredPolicy(config, parts, roles.rollout.params, roles.reward, step)
