"""Tool-use episodes (products with a calculator) on a tiny random model: the plumbing of
multi-turn GRPO end to end in seconds per step (tests, notebooks). Nothing is learned."""

from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.envs.tasks.calculator import calculator_config


def get_config():
    c = calculator_config(make_tiny(config_for("grpo")))
    with c.unlocked():
        c.env.max_turns = 2
        c.env.max_turn_tokens = 8
        c.env.max_episode_tokens = 512
        c.env.warmup_demos = 8
        c.env.warmup_steps = 2
        c.env.warmup_batch_size = 4
    return c
