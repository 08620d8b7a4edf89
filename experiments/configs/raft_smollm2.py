"""RAFT on SmolLM2-135M-Instruct and chain_sum: the ReST-EM config (rest_em_smollm2.py), but
each M-step continues from the last policy and keeps the best of k samples of a prompt (one
accepted completion)."""

import os

from jaxrl_llm.stages import load_config


def get_config():
    here = os.path.dirname(os.path.abspath(__file__))
    config = load_config(os.path.join(here, "rest_em_smollm2.py"))
    config.self_training.method = "raft"
    config.self_training.max_per_prompt = 1
    return config
