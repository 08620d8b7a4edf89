"""The episode tasks a run config can name (`config.env.name`): examples, environments, metrics.

  "calculator"  reasoning-gym products (`config.task`, e.g. 3- and 4-digit factors) answered
                with a calculator tool (`ToolEnv`); success = the final answer is right.
  "multi_if"    generated Multi-IF conversations (`MultiIFEnv`); reward per turn = the fraction
                of its instructions followed; success = every instruction of every turn.

An `EpisodeTask` bundles the training and held-out examples, the environment of one episode,
and the demonstrations used to warm a model up with SFT before RL (`demonstrations`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import ml_collections
import numpy as np

from jaxrl_llm.data import Example
from jaxrl_llm.data.presets import task_pool
from jaxrl_llm.envs.base import Environment
from jaxrl_llm.envs.calculator import calculator_tool, evaluate_expression, format_result
from jaxrl_llm.envs.episodes import EpisodeBatch
from jaxrl_llm.envs.multi_if import MultiIFEnv, multi_if_examples
from jaxrl_llm.envs.sandbox import python_sandbox_tool
from jaxrl_llm.envs.sandbox_isolation import Isolation, isolation
from jaxrl_llm.envs.tool_calls import render_tool_call, tools_system_prompt
from jaxrl_llm.envs.tool_env import ToolEnv

__all__ = [
    "EPISODE_TASKS",
    "TASKS_WITH_OWN_DATA",
    "Demonstration",
    "EpisodeTask",
    "episode_metrics",
    "episode_task",
]

# The calculator task's system message: short, because the prompt is prefilled for every
# episode and trained on in every row (the generic `tools_system_prompt`, with each tool's JSON
# schema, is 330 tokens of SmolLM2's tokenizer; this one about 60).
CALCULATOR_PROMPT = (
    "You have a calculator tool. To use it, write exactly:\n"
    '<tool_call>{{"name": "calculator", "arguments": {{"expression": "{example}"}}}}</tool_call>\n'
    "Its result comes back in a message from the tool. Then reply with only the final number."
)


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
      name: the `EPISODE_TASKS` key.
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


def _tools(env_config) -> list:
    names = [n.strip() for n in env_config.tools.split(",") if n.strip()]
    makers = {
        "calculator": lambda: calculator_tool(timeout_s=env_config.tool_timeout_s),
        "python": lambda: python_sandbox_tool(
            timeout_s=env_config.tool_timeout_s, unsafe=env_config.get("sandbox_unsafe", False)
        ),
    }
    unknown = [n for n in names if n not in makers]
    if unknown or not names:
        raise ValueError(
            f"config.env.tools={env_config.tools!r}: give a comma-separated list of "
            f"{sorted(makers)} (unknown: {unknown})."
        )
    return [makers[n]() for n in names]


def calculator_task(config: ml_collections.ConfigDict) -> EpisodeTask:
    """Products with a calculator: `config.task` gives the reasoning-gym generator."""
    tools = _tools(config.env)
    if [tool.name for tool in tools] == ["calculator"]:
        system = CALCULATOR_PROMPT.format(example="12 * 34")
    else:  # more tools: each one's JSON schema and the call format
        system = tools_system_prompt(tools, preamble=CALCULATOR_PROMPT.format(example="12 * 34"))

    def examples(split: str, seed: int, size: int) -> list[Example]:
        # the hash split of jaxrl_llm.data.split: "test" examples are distinct held-out questions
        side = "held_out" if split == "test" else "train"
        return list(task_pool(config.task, side=side, seed=seed, size=size, eval_seed=seed))

    def make_env() -> Environment:
        return ToolEnv(
            tools, system_prompt=system, instruction_suffix=config.task.instruction_suffix
        )

    def demonstrations(batch: Sequence[Example]) -> list[Demonstration]:
        demos = []
        for example in batch:
            env = make_env()
            messages = env.reset(example)
            # reasoning-gym's entry holds the product's expression, e.g. "361 * 220"
            expression = example.metadata["metadata"]["expression"]
            value = format_result(evaluate_expression(expression))
            call = render_tool_call("calculator", {"expression": expression})
            demos.append(
                Demonstration(
                    messages, [call, value], [[{"role": "tool", "content": value}]], env.tools()
                )
            )
        return demos

    sandbox = isolation() if any(tool.name == "python" for tool in tools) else None
    return EpisodeTask("calculator", examples, make_env, demonstrations, sandbox)


def multi_if_task(config: ml_collections.ConfigDict) -> EpisodeTask:
    """Generated Multi-IF conversations of `config.env.multi_if_turns` user turns."""

    def examples(split: str, seed: int, size: int) -> list[Example]:
        return multi_if_examples(
            size, seed=seed, split=split, num_turns=config.env.multi_if_turns,
            instructions_per_turn=config.env.multi_if_instructions,
        )  # fmt: skip

    return EpisodeTask("multi_if", examples, lambda: MultiIFEnv())


# Tasks whose examples do not come from `config.task` (reasoning-gym).
TASKS_WITH_OWN_DATA = ("multi_if",)

EPISODE_TASKS: dict[str, Callable[[ml_collections.ConfigDict], EpisodeTask]] = {
    "calculator": calculator_task,
    "multi_if": multi_if_task,
}


def episode_task(config: ml_collections.ConfigDict) -> EpisodeTask:
    """The `EpisodeTask` of `config.env.name`."""
    maker = EPISODE_TASKS.get(config.env.name)
    if maker is None:
        raise ValueError(
            f"config.env.name={config.env.name!r} must be one of {sorted(EPISODE_TASKS)} "
            "(or '' for single-turn rollouts)."
        )
    return maker(config)


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


def calculator_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`config` set up for the calculator task (in place): reasoning-gym products of 3- and
    4-digit factors, the calculator tool, up to 3 turns."""
    with config.unlocked():
        config.env.name = "calculator"
        config.env.tools = "calculator"
        config.env.max_turns = 3
        config.task.name = "products"
        config.task.kwargs = ml_collections.ConfigDict(
            {"min_terms": 2, "max_terms": 2, "min_digits": 3, "max_digits": 4}
        )
        config.task.instruction_suffix = ""
    return config


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
