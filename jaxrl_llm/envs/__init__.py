"""Environments for multi-turn episodes: tool use and multi-turn instruction following.

An `Environment` (plain Python, one per episode) opens an episode from a data example and
answers each model turn with observation messages, a reward and whether it is over.
`run_episodes` plays a batch of them on an `EpisodeDecoder` token in and token out: model
turns keep the sampled ids, observations are rendered once by the chat template
(`EpisodeRenderer`) and only their tokens are prefilled into the episode's KV cache. The result
(`EpisodeBatch`) is laid out like a single-turn `Rollout`, loss mask on model tokens only, so
the online algorithms train on it unchanged.

Tools: `Tool` / `call_tool` (schema-checked arguments, time limits, truncated output), the
`<tool_call>` format (`parse_tool_calls`, `tools_system_prompt`), a safe `calculator_tool` and a
subprocess `python_sandbox_tool`. Tasks: `ToolEnv` (reasoning-gym questions with tools) and
`MultiIFEnv` (Multi-IF conversations with IFEval-style `instructions`), registered episode
tasks named by `config.env.name` (`jaxrl_llm.envs.tasks`, one module each).
"""

from jaxrl_llm.envs.base import Environment, EpisodeLimits, StepResult
from jaxrl_llm.envs.calculator import CalculatorError, calculator_tool, evaluate_expression
from jaxrl_llm.envs.chat import EpisodeRenderer
from jaxrl_llm.envs.episodes import END_REASONS, SEGMENT_NAMES, EpisodeBatch, run_episodes
from jaxrl_llm.envs.multi_if import MultiIFEnv, multi_if_examples
from jaxrl_llm.envs.sandbox import SandboxResult, python_sandbox_tool, run_python
from jaxrl_llm.envs.tasks import EpisodeTask, TaskSpec, episode_metrics, episode_task
from jaxrl_llm.envs.tool_calls import (
    CallParse,
    ParsedCall,
    parse_tool_calls,
    render_tool_call,
    tools_system_prompt,
)
from jaxrl_llm.envs.tool_env import ToolEnv
from jaxrl_llm.envs.tools import Tool, ToolResult, ToolStatus, call_tool

__all__ = [
    "END_REASONS",
    "SEGMENT_NAMES",
    "CalculatorError",
    "CallParse",
    "Environment",
    "EpisodeBatch",
    "EpisodeLimits",
    "EpisodeRenderer",
    "EpisodeTask",
    "MultiIFEnv",
    "ParsedCall",
    "SandboxResult",
    "StepResult",
    "TaskSpec",
    "Tool",
    "ToolEnv",
    "ToolResult",
    "ToolStatus",
    "calculator_tool",
    "call_tool",
    "episode_metrics",
    "episode_task",
    "evaluate_expression",
    "multi_if_examples",
    "parse_tool_calls",
    "python_sandbox_tool",
    "render_tool_call",
    "run_episodes",
    "run_python",
    "tools_system_prompt",
]
