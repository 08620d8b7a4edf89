"""A question answered with tools: the environment of tool-use episodes.

Each model turn either calls tools or answers. A turn with a tool-call span (the format of
`jaxrl_llm.envs.tool_calls`) gets one "tool" message per call with the tool's output (or its
error: unknown tool, bad arguments, a raise, a timeout) and the episode goes on; a malformed or
unclosed span gets an error message saying how to write a call. A turn without a call is the
final answer: its reward is the example's scorer on the extracted answer (1 right, 0 wrong),
and the episode ends. Every event is counted for the metrics: "tool_call/attempts",
"tool_call/well_formed", "tool_call/malformed", "tool_call/unclosed", "tool/<status>",
"tool/truncated".

    env = ToolEnv([calculator_tool()], system_prompt=CALCULATOR_PROMPT)  # envs/tasks/calculator.py
    messages = env.reset(example)       # system (tools described) + the question
    env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "361*220"}}</tool_call>')
    # StepResult(observation=[{"role": "tool", "content": "79420"}], reward=0.0, done=False, ...)
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from jaxrl_llm.envs.base import Environment, StepResult
from jaxrl_llm.envs.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, parse_tool_calls
from jaxrl_llm.envs.tools import Tool, call_tool
from jaxrl_llm.rewards.verifiers import extract_answer

__all__ = ["MALFORMED_CALL_MESSAGE", "ToolEnv"]

# What the model reads after a call it did not write correctly.
MALFORMED_CALL_MESSAGE = (
    f"error: the tool call could not be read. Write exactly {TOOL_CALL_OPEN}"
    '{"name": "<tool>", "arguments": {...}}' + f"{TOOL_CALL_CLOSE}."
)


class ToolEnv(Environment):
    """One tool-use episode over `example` (see the module docstring).

    Args:
      tools: the tools the model may call.
      system_prompt: the system message (describe the tools in it for templates without a tool
        section: `tool_calls.tools_system_prompt`).
      instruction_suffix: appended to the question.
    """

    def __init__(self, tools: Sequence[Tool], *, system_prompt: str, instruction_suffix: str = ""):
        self._tools = {tool.name: tool for tool in tools}
        self.system_prompt = system_prompt
        self.instruction_suffix = instruction_suffix
        self.example: Any = None
        self.calls = 0

    def tools(self) -> list[dict]:
        return [tool.schema() for tool in self._tools.values()]

    def reset(self, example) -> list[dict[str, str]]:
        self.example, self.calls = example, 0
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": example.question + self.instruction_suffix},
        ]

    def step(self, reply: str) -> StepResult:
        parsed = parse_tool_calls(reply)
        counts: collections.Counter = collections.Counter()
        if not parsed.attempted:
            score = self.example.score(extract_answer(reply))
            correct = float(score == 1.0)
            info = {"correct": correct, "used_tool": float(self.calls > 0)}
            return StepResult([], correct, True, counts, info)
        counts["tool_call/attempts"] += len(parsed.calls) + parsed.malformed + int(parsed.unclosed)
        counts["tool_call/well_formed"] += len(parsed.calls)
        counts["tool_call/malformed"] += parsed.malformed
        counts["tool_call/unclosed"] += int(parsed.unclosed)
        observation = []
        for call in parsed.calls:
            result = call_tool(self._tools, call.name, call.arguments)
            counts[f"tool/{result.status.value}"] += 1
            counts["tool/truncated"] += int(result.truncated)
            observation.append({"role": "tool", "content": result.output})
        self.calls += len(parsed.calls)
        if parsed.malformed or parsed.unclosed:
            observation.append({"role": "tool", "content": MALFORMED_CALL_MESSAGE})
        info = {"correct": 0.0, "used_tool": float(self.calls > 0)}
        return StepResult(observation, 0.0, False, counts, info)
