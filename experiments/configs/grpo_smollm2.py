"""GRPO on SmolLM2-135M-Instruct and reasoning-gym chain_sum: the README's main job.

Sized to finish on a 2-core CPU in under 30 minutes, evaluation before and after included.
Override any field on the command line, e.g. `--config.train.num_steps=5`.
"""

from jaxrl_llm.config import grpo_config


def get_config():
    return grpo_config()
