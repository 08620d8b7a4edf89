"""ReMax on SmolLM2-135M-Instruct and chain_sum: each sample's reward minus the reward of the
greedy completion of its prompt (one extra greedy decode per step). Otherwise the main job's."""

from jaxrl_llm.config import config_for


def get_config():
    return config_for("remax")
