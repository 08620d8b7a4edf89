"""RAFT on the tiny random model: rest_em_tiny.py with method "raft" (seconds, for tests)."""

import os

from jaxrl_llm.stages import load_config


def get_config():
    config = load_config(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "rest_em_tiny.py")
    )
    config.self_training.method = "raft"
    return config
