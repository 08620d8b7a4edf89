"""The "multi_if" episode task: generated Multi-IF conversations (`MultiIFEnv`).

Each example is a conversation of `config.env.multi_if_turns` user turns, each adding
`config.env.multi_if_instructions` IFEval-style instructions; the reward of a turn is the
fraction of its instructions followed, success is every instruction of every turn. Its
examples are generated here, not taken from `config.task` (`own_data`).
"""

from __future__ import annotations

import ml_collections

from jaxrl_llm.data import Example
from jaxrl_llm.envs.episode_task import EpisodeTask
from jaxrl_llm.envs.multi_if import MultiIFEnv, multi_if_examples
from jaxrl_llm.envs.task_registry import register

__all__ = ["make", "multi_if_config"]


def make(config: ml_collections.ConfigDict) -> EpisodeTask:
    """Generated Multi-IF conversations of `config.env.multi_if_turns` user turns."""

    def examples(split: str, seed: int, size: int) -> list[Example]:
        return multi_if_examples(
            size, seed=seed, split=split, num_turns=config.env.multi_if_turns,
            instructions_per_turn=config.env.multi_if_instructions,
        )  # fmt: skip

    return EpisodeTask("multi_if", examples, lambda: MultiIFEnv())


def multi_if_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`config` set up for multi-turn instruction following (in place): 3 user turns, one new
    instruction each, turn-level credit."""
    with config.unlocked():
        config.env.name = "multi_if"
        config.env.max_turns = 3
        config.env.multi_if_turns = 3
        config.env.credit = "turn"
        config.task.name = "multi_if"
        config.task.instruction_suffix = ""
    return config


register("multi_if", make=make, own_data=True)
