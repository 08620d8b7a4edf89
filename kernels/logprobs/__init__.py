"""Fused token log-probs and entropies from hidden states, without ``[B, T, V]`` logits.

``token_logprobs`` is the entry point (``api.py``); ``token_logprobs_reference`` the naive
float32 source of truth; ``BlockConfig`` the tunables. See ``api.py`` for the backends.
"""

from kernels.logprobs.api import default_implementation, token_logprobs, token_stats
from kernels.logprobs.config import IMPLEMENTATIONS, BlockConfig, default_config
from kernels.logprobs.reference import token_logprobs_reference
from kernels.logprobs.sharded import token_logprobs_sharded

__all__ = [
    "IMPLEMENTATIONS",
    "BlockConfig",
    "default_config",
    "default_implementation",
    "token_logprobs",
    "token_logprobs_reference",
    "token_logprobs_sharded",
    "token_stats",
]
