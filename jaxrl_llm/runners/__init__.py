"""Runners: the loops that drive algorithms (synchronous colocated GRPO)."""

from jaxrl_llm.runners.evaluation import greedy_accuracy
from jaxrl_llm.runners.sync import NonFiniteLossError, rollout_seed, train

__all__ = ["NonFiniteLossError", "greedy_accuracy", "rollout_seed", "train"]
