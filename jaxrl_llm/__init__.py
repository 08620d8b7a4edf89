"""jaxrl_llm: reinforcement-learning post-training of language models in JAX."""

__version__ = "0.1.0"
