"""GRPO on a tiny random-weight model with SmolLM2's tokenizer: seconds per step, for tests,
notebooks and sweeps. Learning is not expected; the plumbing is exercised end to end."""

from jaxrl_llm.config import config_for, make_tiny


def get_config():
    return make_tiny(config_for("grpo"))
