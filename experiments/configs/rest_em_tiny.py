"""ReST-EM (jaxrl_llm/stages/self_training.py) on the tiny random model: seconds, for tests."""

from jaxrl_llm.config import make_tiny
from jaxrl_llm.stages.self_training import self_training_config


def get_config():
    config = make_tiny(self_training_config("rest_em"))
    with config.unlocked():
        s = config.self_training
        s.iterations, s.num_prompts, s.samples_per_prompt = 2, 4, 4
        s.max_new_tokens, s.steps_per_iteration, s.batch_size, s.max_length = 8, 2, 4, 96
        s.threshold = 0.0  # a random model is never right: accept everything (plumbing only)
    return config
