"""jaxrl_llm: reinforcement-learning post-training of language models in JAX."""

from jaxrl_llm.platforms import skip_absent_tpu

__version__ = "0.1.0"
__all__ = ["skip_absent_tpu", "train"]

# Before any backend starts: a CPU machine with the `tpu` extra does not wake libtpu (only the
# planner needs it, and reaches it on its own). See jaxrl_llm/platforms.py.
skip_absent_tpu()


def __getattr__(name: str):
    """`jaxrl_llm.train` (`jaxrl_llm.experiment.train`), imported on first use so that `import
    jaxrl_llm` stays light (command lines import what they need)."""
    if name == "train":
        from jaxrl_llm.experiment import train

        return train
    raise AttributeError(f"module 'jaxrl_llm' has no attribute {name!r}")
