"""Algorithms as values (`Algorithm`: pure functions), one module each, found by name.

    algorithm = jaxrl_llm.algorithms.make(config)     # config.algorithm: "grpo", "ppo", ...

Built in: `grpo` (also RLOO and Dr. GRPO), `ppo` (learned critic, GAE, KL in the reward),
`reinforce_pp` (REINFORCE++), `remax` (greedy baseline), and the preference algorithms
`online_dpo` (best / worst of each group, DPO and its family) and `rrhf` (ranking plus
fine-tuning on the best). A new algorithm is one module that calls `registry.register`; see
`jaxrl_llm.algorithms.registry`. One that needs a new per-sample field collected registers its
server with `register_collected` (`jaxrl_llm.algorithms.collected`).
"""

from jaxrl_llm.algorithms import collected, registry
from jaxrl_llm.algorithms.base import (
    ROLE_NAMES,
    Algorithm,
    Experience,
    GoldReferences,
    GreedyBaseline,
    References,
    check_algorithm,
)
from jaxrl_llm.algorithms.batch import (
    PolicyBatch,
    build_batch,
    check_grad_accumulation,
    micro_batch_weights,
    pack_batch,
    split_minibatches,
)
from jaxrl_llm.algorithms.collected import CollectContext, CollectedField, register_collected
from jaxrl_llm.algorithms.grpo import GRPOBatch, GRPOLossConfig, group_advantages, grpo_loss
from jaxrl_llm.algorithms.policy_loss import PolicyLossConfig, policy_loss
from jaxrl_llm.algorithms.registry import AlgorithmSpec, get, make, names, register

__all__ = [
    "ROLE_NAMES",
    "Algorithm",
    "AlgorithmSpec",
    "CollectContext",
    "CollectedField",
    "Experience",
    "GoldReferences",
    "GreedyBaseline",
    "References",
    "GRPOBatch",
    "GRPOLossConfig",
    "PolicyBatch",
    "PolicyLossConfig",
    "build_batch",
    "check_grad_accumulation",
    "check_algorithm",
    "collected",
    "get",
    "group_advantages",
    "grpo_loss",
    "make",
    "names",
    "micro_batch_weights",
    "pack_batch",
    "policy_loss",
    "register",
    "register_collected",
    "registry",
    "split_minibatches",
]
