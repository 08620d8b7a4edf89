"""REINFORCE++ on SmolLM2-135M-Instruct and chain_sum: no critic, KL in the reward (k1, beta
0.01), discounted returns whitened over the batch. Otherwise the main job's settings."""

from jaxrl_llm.config import config_for


def get_config():
    return config_for("reinforce_pp")
