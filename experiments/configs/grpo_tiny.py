"""GRPO on a tiny random-weight model with SmolLM2's tokenizer: seconds per step, for tests,
notebooks and sweeps. Learning is not expected; the plumbing is exercised end to end."""

from jaxrl_llm.config import grpo_config


def get_config():
    config = grpo_config()
    with config.unlocked():
        config.model.init = "random"
        config.model.random.update(
            dict(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
        )
        config.task.eval_size = 8
        config.rollout.num_prompts = 2
        config.rollout.group_size = 4
        config.rollout.max_new_tokens = 8
        config.train.num_steps = 4
        config.train.num_minibatches = 2
        config.train.checkpoint_every = 2
        config.train.sample_every = 2
        config.eval.batch_size = 8
        config.eval.max_new_tokens = 8
        config.optimizer.learning_rate = 1e-3
        config.optimizer.warmup_steps = 0
    return config
