"""What a run needs of an episode task: its examples, its environment, its demonstrations.

An `EpisodeTask` is what a registered task's factory returns (`jaxrl_llm.envs.tasks`):

    EpisodeTask("echo", examples=lambda split, seed, size: [...], make_env=EchoEnv)

`episode_metrics` turns a batch of finished episodes into the accuracy-like metrics every task
reports (the environments' "correct", per-turn scores, tool-call counts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from jaxrl_llm.data import Example
from jaxrl_llm.envs.base import Environment
from jaxrl_llm.envs.episodes import EpisodeBatch
from jaxrl_llm.envs.sandbox_isolation import Isolation

__all__ = ["Demonstration", "EpisodeTask", "episode_metrics"]


class Demonstration(NamedTuple):
    """A scripted episode for SFT warm-up: the opening messages, then alternating model turns
    (text) and observation messages (lists), ending on a model turn."""

    messages: list[dict[str, str]]
    turns: list[str]
    observations: list[list[dict[str, str]]]
    tools: list[dict]


class EpisodeTask(NamedTuple):
    """What a run needs of an episode task.

    Attributes:
      name: the registered name (`config.env.name`).
      examples: `(split, seed, size) -> [Example]`, split "train" or "test".
      make_env: `() -> Environment`, a fresh environment for one episode.
      demonstrations: `(examples) -> [Demonstration]` for SFT warm-up, or None.
      sandbox: the isolation model code runs under when the task has the "python" tool
        (`sandbox_isolation.Isolation`), else None; the runner logs it.
    """

    name: str
    examples: Callable[[str, int, int], list[Example]]
    make_env: Callable[[], Environment]
    demonstrations: Callable[[Sequence[Example]], list[Demonstration]] | None = None
    sandbox: Isolation | None = None


def episode_metrics(batch: EpisodeBatch) -> dict[str, float]:
    """Accuracy-like metrics of finished episodes: "accuracy" (the environments' "correct"),
    per-turn scores ("turn<k>/accuracy", "turn<k>/score") where the environment reports
    them, and the batch's event metrics (tool calls, end reasons)."""
    infos = batch.infos
    out = {"accuracy": float(np.mean([i.get("correct", 0.0) for i in infos])) if infos else 0.0}
    turns = sorted({k for i in infos for k in i if k.startswith("turn") and k.endswith("/score")})
    for key in turns:
        scores = np.array([i.get(key, 0.0) for i in infos], np.float64)  # a missing turn: 0
        turn = key.split("/")[0]
        out[f"{turn}/score"] = float(scores.mean())
        out[f"{turn}/accuracy"] = float(np.mean(scores == 1.0))
    attempts = batch.metrics.get("episode/tool_call/attempts", 0.0)
    if attempts or "episode/tool_call/attempts" in batch.metrics:
        out["tool_call/well_formed_rate"] = (
            batch.metrics.get("episode/tool_call/well_formed", 0.0) / attempts if attempts else 0.0
        )
    used = [i.get("used_tool", None) for i in infos]
    if any(u is not None for u in used):
        out["tool/episodes_with_call"] = float(np.mean([u or 0.0 for u in used]))
    out.update(batch.metrics)
    return out
