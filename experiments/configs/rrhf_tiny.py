"""rrhf on the tiny random-weight model (see grpo_tiny.py): for tests and notebooks."""

from jaxrl_llm.config import config_for, make_tiny


def get_config():
    return make_tiny(config_for("rrhf"))
