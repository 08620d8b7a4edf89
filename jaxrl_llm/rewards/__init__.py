"""Reward functions `(prompt, completion, example) -> float`, answer extraction and a runner;
a user's reward functions in TRL's batch shape `fn(prompts, completions, **columns)`
(`jaxrl_llm.rewards.user`, docs/rewards.md).

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
from jaxrl_llm.rewards.user import (
    ON_ERROR,
    BatchReward,
    BatchRewardFn,
    BatchScores,
    RewardColumnError,
    RewardFunctionError,
)
from jaxrl_llm.rewards.user_loading import (
    check_reward_columns,
    load_reward_function,
    user_rewards,
)
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
    "BatchReward",
    "BatchRewardFn",
    "BatchScores",
    "ON_ERROR",
    "RewardColumnError",
    "RewardFn",
    "RewardFunctionError",
    "RewardOutput",
    "RewardRunner",
    "accuracy",
    "answer_prior",
    "chance_corrected",
    "chance_correction",
    "check_answer_rule",
    "check_reward_columns",
    "exact_task_reward",
    "extract_answer",
    "extract_last_number",
    "extract_stated_number",
    "extract_tagged_answer",
    "find_numbers",
    "format_reward",
    "length_reward",
    "load_reward_function",
    "math_verify_reward",
    "number_key",
    "stated_numbers",
    "task_answer_prior",
    "task_reward",
    "user_rewards",
]
