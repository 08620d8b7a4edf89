"""An inference budget (IBPO-style) on the main job: chain_sum completions held within 8 tokens
by a Lagrangian multiplier on the excess (n / 8 - 1)+ (docs/constraints.md states the
formulation).
    python -m jaxrl_llm.main --config experiments/configs/ibpo_smollm2.py --workdir runs/ibpo
"""

from jaxrl_llm.config import grpo_config


def get_config():
    config = grpo_config()
    with config.unlocked():
        config.constraints.mode = "lagrangian"
        config.constraints.budgets = "chain_sum:8"
        config.constraints.dual_lr = 0.5
        config.constraints.max_multiplier = 2.0
    return config
