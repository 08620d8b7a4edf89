"""Held-out evaluation of an episode task (`config.env`): greedy episodes on its test examples.

The training runner (`runners.episode_player.EpisodePlayer.evaluate`) and the command line
(`python -m jaxrl_llm.evaluate --workdir <an episode run>`) report the same metrics:

    accuracy                     episodes the environment scored correct
    turn<k>/accuracy, /score     per user turn, where the environment scores turns (Multi-IF)
    tool_call/well_formed_rate   well-formed calls over call attempts (tool tasks)
    tool/episodes_with_call      episodes with at least one tool call (tool tasks)
    episode/turns                model turns per episode
    episode/end/<reason>         how episodes ended (done, max_turns, ...)

Example:
  >>> metrics = evaluate_episodes(config, model, tokenizer, params=params, size=50)
  >>> print(episode_table({"calculator": metrics}))
"""

from __future__ import annotations

import ml_collections
import numpy as np

from jaxrl_llm.envs.chat import EpisodeRenderer
from jaxrl_llm.envs.config import episode_limits
from jaxrl_llm.envs.episodes import EpisodeBatch, run_episodes
from jaxrl_llm.envs.tasks import episode_metrics, episode_task
from jaxrl_llm.rollout.chat import chat_generation_config
from jaxrl_llm.rollout.episodes import EpisodeDecoder

__all__ = ["HELD_OUT_KEYS", "episode_table", "evaluate_episodes", "held_out_metrics"]

# Held-out metrics kept from `episode_metrics` besides the per-turn ones and the end reasons
# (the rest are per-batch event counts).
HELD_OUT_KEYS = (
    "accuracy",
    "tool_call/well_formed_rate",
    "tool/episodes_with_call",
    "episode/turns",
)


def held_out_metrics(batch: EpisodeBatch) -> dict[str, float]:
    """The held-out metrics (the module docstring's) of a batch of greedy episodes."""
    metrics = episode_metrics(batch)
    keep = {k: v for k, v in metrics.items() if k in HELD_OUT_KEYS or k.startswith("turn")}
    keep.update({k: v for k, v in metrics.items() if k.startswith("episode/end/")})
    return keep


def evaluate_episodes(
    config: ml_collections.ConfigDict,
    model,
    tokenizer,
    *,
    params=None,
    size: int | None = None,
    seed: int | None = None,
    num_slots: int = 50,
) -> dict[str, float]:
    """Greedy episodes of `config.env`'s task on `size` test examples (default
    `config.task.eval_size`, seed `config.task.eval_seed`), played by `model` (with `params`,
    an `nnx.State` of its graph, when given); returns `held_out_metrics`."""
    task = episode_task(config)
    limits = episode_limits(config)
    size = config.task.eval_size if size is None else size
    seed = config.task.eval_seed if seed is None else seed
    examples = task.examples("test", seed, size)
    if not examples:
        raise ValueError(f"task {config.env.name!r} gave no test examples at size={size}.")
    greedy = chat_generation_config(tokenizer, max_new_tokens=1, temperature=0.0)
    decoder = EpisodeDecoder(
        model, greedy, num_slots=min(num_slots, len(examples)),
        max_length=limits.max_episode_tokens,
    )  # fmt: skip
    batch = run_episodes(
        decoder,
        EpisodeRenderer(tokenizer),
        [task.make_env() for _ in examples],
        examples,
        limits=limits,
        seed=0,
        params=params,
        refill_at=config.env.refill_at or None,
    )
    return held_out_metrics(batch)


def episode_table(results: dict[str, dict[str, float]]) -> str:
    """A Markdown table of `evaluate_episodes` results by task: accuracy, each turn's accuracy,
    tool-call rates, turns per episode, and the episodes that hit a limit."""
    turns = sorted(
        {k.split("/")[0] for m in results.values() for k in m if k.endswith("/accuracy")},
        key=lambda t: int(t.removeprefix("turn")),
    )  # fmt: skip
    tool = any("tool/episodes_with_call" in m for m in results.values())
    head = ["task", "accuracy", *(f"turn {t.removeprefix('turn')} accuracy" for t in turns)]
    if tool:
        head += ["episodes with a tool call", "well-formed calls"]
    head += ["turns / episode", "ended by a limit"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    pct = lambda v: "" if v is None or np.isnan(v) else f"{100 * v:.1f}%"
    for name, m in results.items():
        cells = [name, pct(m["accuracy"]), *(pct(m.get(f"{t}/accuracy")) for t in turns)]
        if tool:
            cells += [
                pct(m.get("tool/episodes_with_call")),
                pct(m.get("tool_call/well_formed_rate")),
            ]
        limited = sum(
            v for k, v in m.items() if k.startswith("episode/end/") and k != "episode/end/done"
        )
        cells += [f"{m.get('episode/turns', float('nan')):.2f}", f"{limited:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
