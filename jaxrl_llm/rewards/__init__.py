"""Reward functions `(prompt, completion, example) -> float`, answer extraction and a runner.

Example:
  >>> from jaxrl_llm import rewards
  >>> runner = rewards.RewardRunner(
  ...     {"task": rewards.task_reward, "format": rewards.format_reward},
  ...     weights={"task": 1.0, "format": 0.1},
  ... )
  >>> out = runner(prompts, completions, examples)
  >>> rewards.accuracy(out.per_function["task"])
"""

from jaxrl_llm.rewards.extraction import extract_last_number, extract_tagged_answer, find_numbers
from jaxrl_llm.rewards.runner import RewardFn, RewardOutput, RewardRunner
from jaxrl_llm.rewards.verifiers import (
    accuracy,
    exact_task_reward,
    extract_answer,
    format_reward,
    length_reward,
    math_verify_reward,
    task_reward,
)

__all__ = [
    "RewardFn",
    "RewardOutput",
    "RewardRunner",
    "accuracy",
    "exact_task_reward",
    "extract_answer",
    "extract_last_number",
    "extract_tagged_answer",
    "find_numbers",
    "format_reward",
    "length_reward",
    "math_verify_reward",
    "task_reward",
]
