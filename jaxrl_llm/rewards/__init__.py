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

from jaxrl_llm.rewards.chance import (
    AnswerPrior,
    answer_prior,
    chance_corrected,
    chance_correction,
    task_answer_prior,
)
from jaxrl_llm.rewards.extraction import (
    extract_last_number,
    extract_stated_number,
    extract_tagged_answer,
    find_numbers,
    number_key,
    stated_numbers,
)
from jaxrl_llm.rewards.runner import RewardFn, RewardOutput, RewardRunner
from jaxrl_llm.rewards.verifiers import (
    ANSWER_RULES,
    accuracy,
    check_answer_rule,
    exact_task_reward,
    extract_answer,
    format_reward,
    length_reward,
    math_verify_reward,
    task_reward,
)

__all__ = [
    "ANSWER_RULES",
    "AnswerPrior",
    "RewardFn",
    "RewardOutput",
    "RewardRunner",
    "accuracy",
    "answer_prior",
    "chance_corrected",
    "chance_correction",
    "check_answer_rule",
    "exact_task_reward",
    "extract_answer",
    "extract_last_number",
    "extract_stated_number",
    "extract_tagged_answer",
    "find_numbers",
    "format_reward",
    "length_reward",
    "math_verify_reward",
    "number_key",
    "stated_numbers",
    "task_answer_prior",
    "task_reward",
]
