"""Algorithms: small modules composing rollout, rewards, losses and the train step."""

from jaxrl_llm.algorithms.grpo import (
    GRPOBatch,
    GRPOLossConfig,
    build_batch,
    group_advantages,
    grpo_loss,
    pack_batch,
    split_minibatches,
)

__all__ = [
    "GRPOBatch",
    "GRPOLossConfig",
    "build_batch",
    "group_advantages",
    "grpo_loss",
    "pack_batch",
    "split_minibatches",
]
