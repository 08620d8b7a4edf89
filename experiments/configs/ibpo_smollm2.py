"""An inference budget (IBPO-style) on the main job: chain_sum completions held to a mean of
8 tokens by a Lagrangian multiplier on n / 8, capped at 0.5 (docs/constraints.md states the
formulation).
    python -m jaxrl_llm.main --config experiments/configs/ibpo_smollm2.py --workdir runs/ibpo
"""

from jaxrl_llm.config import grpo_config


def get_config():
    config = grpo_config()
    with config.unlocked():
        config.constraints.mode = "lagrangian"
        config.constraints.budgets = "chain_sum:8"
        # The multiplier's cap keeps a correct answer at the budget (1 - lambda * 1) worth more
        # than an empty one (0): with dual_lr 1.0 and no cap the multiplier overshot to 4 and the
        # policy collapsed to empty answers (docs/constraints.md).
        config.constraints.dual_lr = 0.2
        config.constraints.max_multiplier = 0.5
    return config
