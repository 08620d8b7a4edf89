"""rrhf on SmolLM2-135M-Instruct and chain_sum, the GRPO run's rollout settings (8 prompts x 4
samples a step); see jaxrl_llm/algorithms/rrhf.py. Learning rate 1e-5 (not tuned)."""

from jaxrl_llm.config import config_for


def get_config():
    config = config_for("rrhf")
    config.optimizer.learning_rate = 1e-5
    return config
