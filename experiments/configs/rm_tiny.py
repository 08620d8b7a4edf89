"""The outcome reward-model stage on a tiny random model (seconds; for tests and notebooks). A
random policy never solves the task, so tests give it a pair file (config.rm.pairs)."""

from jaxrl_llm.config import make_tiny
from jaxrl_llm.stages.reward_model import rm_config


def get_config():
    config = rm_config()
    make_tiny(config)
    tiny_rm_schedule(config)
    return config


def tiny_rm_schedule(config) -> None:
    """A few updates on a few short samples (`config` already tiny)."""
    with config.unlocked():
        config.train.num_steps = 6
        config.train.checkpoint_every = 3
        config.rm.num_prompts = 8
        config.rm.group_size = 4
        config.rm.max_new_tokens = 8
        config.rm.batch_size = 4
        config.rm.max_length = 96
        config.optimizer.learning_rate = 3e-3
