"""Rollout: jitted batched generation with a KV cache, sampling, exact log-probs, JetStream adapter.

`generate(model, prompts, max_new_tokens=...)` is the one-call API; `Generator` keeps a config and
reuses compiled programs (compacting finished rows away and prefilling shared prompts once);
`ContinuousGenerator` decodes large prompt sets through a fixed set of refilled slots; `Rollout`
documents the output layout. `SlotDecoder` is the step-at-a-time
(continuous batching) form of the same decode, and `JetStreamEngine` (needs the `jetstream` extra)
serves it through JetStream's orchestrator; it is imported lazily.
"""

from jaxrl_llm.rollout.attention_choice import DECODE_ATTENTION
from jaxrl_llm.rollout.batching import PackedPrompts, bucket_size, pack_prompts, pack_stop_sequences
from jaxrl_llm.rollout.continuous import ContinuousGenerator
from jaxrl_llm.rollout.decode_state import DecodeWork, decode_step, next_token_logits, prefill
from jaxrl_llm.rollout.engine import GenerationConfig, Generator, generate, trace_count
from jaxrl_llm.rollout.kv_cache import CacheLayout
from jaxrl_llm.rollout.kv_cache import resolve as resolve_cache_shardings
from jaxrl_llm.rollout.prefix_sharing import PREFIX_SHARING_MODES, PrefillPlan, plan_prefill
from jaxrl_llm.rollout.sampling import (
    SampleOutput,
    categorical,
    filter_logits,
    sample_tokens,
    sampling_logprobs,
    sequence_keys,
    step_keys,
)
from jaxrl_llm.rollout.slots import Prefix, SlotDecoder, SlotState, SlotStep
from jaxrl_llm.rollout.types import FINISH_REASON_NAMES, FinishReason, Rollout

__all__ = [
    "CacheLayout",
    "ContinuousGenerator",
    "DECODE_ATTENTION",
    "DecodeWork",
    "FINISH_REASON_NAMES",
    "FinishReason",
    "GenerationConfig",
    "Generator",
    "JetStreamEngine",
    "PREFIX_SHARING_MODES",
    "PackedPrompts",
    "PrefillPlan",
    "Prefix",
    "Rollout",
    "SampleOutput",
    "SlotDecoder",
    "SlotState",
    "SlotStep",
    "bucket_size",
    "categorical",
    "decode_step",
    "filter_logits",
    "generate",
    "next_token_logits",
    "pack_prompts",
    "pack_stop_sequences",
    "plan_prefill",
    "prefill",
    "resolve_cache_shardings",
    "sample_tokens",
    "sampling_logprobs",
    "sequence_keys",
    "step_keys",
    "trace_count",
]


def __getattr__(name):
    # JetStream pulls TensorFlow (about 2 GB): import it only when the adapter is asked for.
    if name == "JetStreamEngine":
        try:
            from jaxrl_llm.rollout.jetstream_engine import JetStreamEngine
        except ImportError as e:
            raise ImportError(
                f"JetStreamEngine needs google-jetstream ({e}): pip install 'jaxrl_llm[jetstream]' "
                "(it pulls TensorFlow, about 2 GB)."
            ) from e
        return JetStreamEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
