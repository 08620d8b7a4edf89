"""The SFT stage on a tiny random model (seconds; for tests and notebooks)."""

from jaxrl_llm.config import make_tiny
from jaxrl_llm.stages.sft import sft_config


def get_config():
    return tiny_sft_schedule(make_tiny(sft_config()))


def tiny_sft_schedule(config):
    """The tiny stage's steps, batch and lengths (shared with ppo_prm_steps_tiny.py)."""
    with config.unlocked():
        config.train.num_steps = 6
        config.train.checkpoint_every = 3
        config.sft.batch_size = 4
        config.sft.max_length = 96
        config.sft.eval_records = 8
        config.sft.eval_every = 3
        config.optimizer.learning_rate = 3e-3
    return config
