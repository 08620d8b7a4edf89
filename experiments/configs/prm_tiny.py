"""The process reward-model stage on a tiny random model (seconds; for tests and notebooks)."""

from jaxrl_llm.config import make_tiny
from jaxrl_llm.stages.process_reward_model import prm_config


def get_config():
    return tiny_prm_schedule(make_tiny(prm_config()))


def tiny_prm_schedule(config):
    """The tiny stage's steps, rollouts and lengths (shared with ppo_prm_steps_tiny.py)."""
    with config.unlocked():
        config.train.num_steps = 6
        config.train.checkpoint_every = 3
        config.prm.num_prompts = 4
        config.prm.group_size = 2
        config.prm.rollouts = 2
        config.prm.max_new_tokens = 12
        config.prm.batch_size = 4
        config.prm.max_length = 128
        config.optimizer.learning_rate = 3e-3
    return config
