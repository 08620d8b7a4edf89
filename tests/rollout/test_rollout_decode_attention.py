"""The rollout with a decode attention kernel (`GenerationConfig.decode_attention`): greedy
tokens identical to the masked full-cache XLA path, for prompts of different lengths with
compaction, one device and a sharded cache; and how each choice resolves on this CPU."""

import jax
import numpy as np
import pytest

from jaxrl_llm.config import base_config, validate_config
from jaxrl_llm.models import init_model, tiny_config
from jaxrl_llm.rollout import CacheLayout, GenerationConfig, Generator
from jaxrl_llm.rollout.attention_choice import DECODE_ATTENTION, resolve
from jaxrl_llm.sharding import DECODE_RULES, make_mesh, shard_model
from kernels.decode_attention import pallas_gpu, pallas_tpu

# Prompts of 1 to 37 tokens: rows whose filled slots end in different kernel blocks.
PROMPTS = [[5, 17, 3], [9, 1, 22, 40, 41, 42, 7, 8, 100, 2] * 3, [77], [4, 4] + [60] * 35]
KERNELS = {"pallas_tpu": (pallas_tpu.TRACE_COUNTS, "paged"),
           "pallas_gpu": (pallas_gpu.TRACE_COUNTS, "split_k")}  # fmt: skip


def _greedy(model, choice: str, cache_shardings=None, **options):
    """A greedy generator whose rows end at different steps (EOS ids the model samples early
    in some rows), compacting down to 2 rows."""
    config = GenerationConfig(max_new_tokens=10, temperature=0.0, eos_ids=(111, 38),
                              min_compact_batch=2, decode_attention=choice, **options)  # fmt: skip
    return Generator(model, config, cache_shardings=cache_shardings)


@pytest.fixture(scope="module")
def model():
    """Heads of 128 (the TPU kernel's lane width), 2 KV heads of 2 query heads each; untied head
    (see tests/rollout/conftest.py)."""
    config = tiny_config(head_dim=128, tie_word_embeddings=False)
    return init_model(config, seed=0)


@pytest.mark.parametrize(
    "implementation,cache_dtype",
    # The TPU kernel computes with bfloat16 pages: both paths get a bfloat16 cache.
    [("pallas_gpu", None), ("pallas_tpu", "bfloat16")],
)
def test_greedy_tokens_identical_with_and_without_the_kernel(model, implementation, cache_dtype):
    want = _greedy(model, "xla", cache_dtype=cache_dtype)(PROMPTS)
    counts, key = KERNELS[implementation]
    before = counts[key]
    generator = _greedy(model, implementation, cache_dtype=cache_dtype)
    static = generator.program_options(4, copies_rows=False)
    assert (static.attention, static.interpret) == (implementation, True)
    got = generator(PROMPTS)
    assert counts[key] > before  # the kernel was traced into the decode loop
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.lengths, want.lengths)
    assert len(set(np.asarray(want.lengths).tolist())) > 1  # rows finished at different steps
    np.testing.assert_allclose(got.raw_logprobs, want.raw_logprobs, atol=2e-4)


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 (fake) devices")
def test_sharded_cache_runs_the_kernel_per_device(model):
    """Rows over "data", KV heads over "model": the kernel under `shard_map` on each device's
    rows and heads gives the one-device XLA result."""
    want = _greedy(model, "xla")(PROMPTS)
    mesh = make_mesh((2, 2), ("data", "model"), devices=jax.devices()[:4])
    sharded = shard_model(model, mesh, DECODE_RULES)
    generator = _greedy(sharded, "pallas_gpu", CacheLayout(mesh, DECODE_RULES))
    before = pallas_gpu.TRACE_COUNTS["split_k"]
    got = generator(PROMPTS)
    assert pallas_gpu.TRACE_COUNTS["split_k"] > before
    np.testing.assert_array_equal(got.tokens, want.tokens)
    assert len(got.tokens.sharding.device_set) == 4


def test_choices_resolve_on_a_cpu():
    """No kernel on a CPU: "auto" and "kernel" run the jnp reference (the XLA path); a kernel
    by name runs in Pallas' interpreter; a bad value is one line naming the field."""
    options = dict(head_dim=64, cache_dtype="float32", cache_shardings=None)
    assert resolve("auto", **options) == ("xla", False)
    assert resolve("kernel", **options) == ("xla", False)
    assert resolve("xla", **options) == ("xla", False)
    assert resolve("pallas_gpu", **options) == ("pallas_gpu", True)
    with pytest.raises(ValueError, match="head_dim % 128 == 0"):
        resolve("pallas_tpu", **options)
    with pytest.raises(ValueError, match=r"GenerationConfig: decode_attention='flash' must be"):
        GenerationConfig(max_new_tokens=4, decode_attention="flash")
    config = base_config()
    config.rollout.decode_attention = "paged"
    with pytest.raises(ValueError) as error:
        validate_config(config)
    message = str(error.value)
    assert message == (
        f"config.rollout.decode_attention='paged' must be one of {DECODE_ATTENTION}."
    )
