"""Offline DPO (jaxrl_llm/stages/preference.py) on the tiny random model: seconds, for tests.
Give a pair file with --config.preference.pairs, or let it make pairs from its own samples."""

from jaxrl_llm.config import make_tiny
from jaxrl_llm.stages.preference import preference_config


def get_config():
    return tiny_pair_schedule(make_tiny(preference_config("sigmoid")))


def tiny_pair_schedule(config):
    """The tiny stage's sampled pairs, batches and lengths (shared with from_sft_tiny.py)."""
    with config.unlocked():
        p = config.preference
        p.num_prompts, p.group_size, p.max_new_tokens = 8, 4, 8
        p.batch_size, p.max_length, p.eval_every = 4, 96, 2
        p.beta = 0.5
    return config
