"""The "calculator" episode task: reasoning-gym questions answered with tools (`ToolEnv`).

The examples are the run's task (`config.task`, e.g. products of 3- and 4-digit factors); the
tools are `config.env.tools` ("calculator", "python": the sandbox); an episode succeeds when
the final answer is right. Its demonstrations (SFT warm-up) call the calculator on the
product's expression and answer with the result.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_collections

from jaxrl_llm.data import Example
from jaxrl_llm.data.presets import task_pool
from jaxrl_llm.envs.base import Environment
from jaxrl_llm.envs.calculator import calculator_tool, evaluate_expression, format_result
from jaxrl_llm.envs.episode_task import Demonstration, EpisodeTask
from jaxrl_llm.envs.sandbox import python_sandbox_tool
from jaxrl_llm.envs.sandbox_isolation import isolation
from jaxrl_llm.envs.task_registry import register
from jaxrl_llm.envs.tool_calls import render_tool_call, tools_system_prompt
from jaxrl_llm.envs.tool_env import ToolEnv

__all__ = ["CALCULATOR_PROMPT", "TOOLS", "calculator_config", "make", "tool_names", "validate"]

# The calculator task's system message: short, because the prompt is prefilled for every
# episode and trained on in every row (the generic `tools_system_prompt`, with each tool's JSON
# schema, is 330 tokens of SmolLM2's tokenizer; this one about 60).
CALCULATOR_PROMPT = (
    "You have a calculator tool. To use it, write exactly:\n"
    '<tool_call>{{"name": "calculator", "arguments": {{"expression": "{example}"}}}}</tool_call>\n'
    "Its result comes back in a message from the tool. Then reply with only the final number."
)

# The tools `config.env.tools` may list, each built from the `config.env` section.
TOOLS = {
    "calculator": lambda env: calculator_tool(timeout_s=env.tool_timeout_s),
    "python": lambda env: python_sandbox_tool(
        timeout_s=env.tool_timeout_s, unsafe=env.get("sandbox_unsafe", False)
    ),
}


def tool_names(env_config: ml_collections.ConfigDict) -> list[str]:
    """The tools of `config.env.tools` ("calculator,python" -> ["calculator", "python"]).

    Raises:
      ValueError: none given, or one not in `TOOLS`.
    """
    names = [n.strip() for n in env_config.tools.split(",") if n.strip()]
    unknown = [n for n in names if n not in TOOLS]
    if unknown or not names:
        raise ValueError(
            f"config.env.tools={env_config.tools!r}: give a comma-separated list of "
            f"{sorted(TOOLS)} (unknown: {unknown})."
        )
    return names


def validate(config: ml_collections.ConfigDict) -> None:
    """The calculator task's rules: `config.env.tools` names known tools."""
    tool_names(config.env)


def make(config: ml_collections.ConfigDict) -> EpisodeTask:
    """Products with a calculator: `config.task` gives the reasoning-gym generator."""
    tools = [TOOLS[name](config.env) for name in tool_names(config.env)]
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


register("calculator", make=make, validate=validate)
