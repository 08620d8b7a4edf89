"""The tiny GRPO run (grpo_tiny.py) through the asynchronous runner: batches up to two learner
versions stale, decoupled PPO correction, deterministic schedule. For tests and notebooks."""

from jaxrl_llm.config import config_for, make_tiny


def get_config():
    config = make_tiny(config_for("grpo"))
    with config.unlocked():
        config.async_rl.enabled = True
        config.async_rl.max_staleness = 2
        config.off_policy.correction = "decoupled_ppo"
        config.train.checkpoint_every = 1
    return config
