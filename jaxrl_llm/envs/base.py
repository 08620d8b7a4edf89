"""The environment interface of multi-turn episodes: plain Python, one object per episode.

An environment starts an episode from a data example (`reset` returns the opening chat
messages) and answers each model turn (`step` gets the turn's text and returns the messages to
show next, a reward and whether the episode is over). It never sees token ids: the episode
runner (`jaxrl_llm.envs.run_episodes`) keeps the sampled ids as they are and renders only the
environment's messages through the chat template.

    class Echo(Environment):
        def reset(self, example):
            return [{"role": "user", "content": example.question}]
        def step(self, reply):
            return StepResult(observation=[], reward=float("42" in reply), done=True)
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["Environment", "EpisodeLimits", "StepResult"]


class StepResult(NamedTuple):
    """An environment's answer to one model turn.

    Attributes:
      observation: chat messages ({"role": ..., "content": ...}) shown before the model's next
        turn (tool results, the next user message); ignored when `done`.
      reward: the turn's reward (a float; the episode's outcome is the sum over its turns).
      done: the episode is over.
      counts: event counts of this turn for the metrics, e.g. {"tool/ok": 1,
        "tool_call/malformed": 1}; summed over the batch and logged as "episode/<name>".
      info: per-turn values kept with the episode (e.g. {"correct": 1.0}); the last turn's are
        the episode's.
    """

    observation: list[dict[str, str]]
    reward: float
    done: bool
    counts: Mapping[str, float] = {}
    info: Mapping[str, float] = {}


class Environment(abc.ABC):
    """One episode's environment (a new instance per episode; it may keep state)."""

    @abc.abstractmethod
    def reset(self, example: Any) -> list[dict[str, str]]:
        """The opening messages of the episode (system and first user message)."""

    @abc.abstractmethod
    def step(self, reply: str) -> StepResult:
        """Answers the model's turn `reply` (its text, special tokens removed)."""

    def tools(self) -> list[dict]:
        """The JSON schemas of the tools this environment offers (for templates with a tool
        section); [] when it has none."""
        return []


@dataclasses.dataclass(frozen=True)
class EpisodeLimits:
    """Per-episode limits; an episode that reaches one ends with the limit's name as its reason.

    Attributes:
      max_turns: model turns per episode ("max_turns").
      max_turn_tokens: tokens one model turn may sample; a turn cut there is passed to the
        environment as it is (counted as "turn/length_cut", not an episode end).
      max_episode_tokens: T, all tokens of an episode (prompt, turns, observations); a
        conversation that outgrows it ends ("max_episode_tokens"). Also the KV cache length.
    """

    max_turns: int = 4
    max_turn_tokens: int = 128
    max_episode_tokens: int = 1024

    def __post_init__(self):
        for name in ("max_turns", "max_turn_tokens", "max_episode_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"EpisodeLimits: {name}={getattr(self, name)} must be >= 1.")
        if self.max_turn_tokens >= self.max_episode_tokens:
            raise ValueError(
                f"EpisodeLimits: max_turn_tokens={self.max_turn_tokens} must be smaller than "
                f"max_episode_tokens={self.max_episode_tokens} (the prompt needs room too)."
            )
