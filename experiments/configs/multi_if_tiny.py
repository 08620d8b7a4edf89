"""Multi-turn instruction following (3 user turns) on a tiny random model, turn-level credit:
the plumbing in seconds per step (tests, notebooks). Nothing is learned."""

from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.envs.tasks.multi_if import multi_if_config


def get_config():
    c = multi_if_config(make_tiny(config_for("grpo")))
    with c.unlocked():
        c.env.max_turn_tokens = 8
        c.env.max_episode_tokens = 256
    return c
