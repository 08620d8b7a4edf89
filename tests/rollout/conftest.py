"""Shared fixtures of the rollout tests: one tiny random model for every test file."""

import pytest

from jaxrl_llm.models import init_model, tiny_config


@pytest.fixture(scope="session")
def tiny_model():
    """2 layers, D=64, V=256, untied head (with tied embeddings a random tiny model only repeats
    its input token, which would make greedy tests trivial)."""
    return init_model(tiny_config(tie_word_embeddings=False), seed=0)
