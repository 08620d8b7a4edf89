"""PPO with a learned critic on SmolLM2-135M-Instruct and chain_sum (the main job's task).

The critic starts from the policy's trunk with a fresh scalar head and trains with its own AdamW
(config.critic); the KL to the initial policy is in the reward (k1, beta 0.05), advantages are
GAE(1.0, 0.95), whitened. Everything else is the main job's (experiments/configs/grpo_smollm2.py).
"""

from jaxrl_llm.config import config_for


def get_config():
    return config_for("ppo")
