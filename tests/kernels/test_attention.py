"""Splash attention (kernels/attention) in Pallas' interpreter against the model's XLA attention:
causal, packed segments, a sliding window, grouped-query heads, gradients; and inside the
model under a layout that asks for it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.models import init_model, tiny_gemma3_config
from jaxrl_llm.models.layers import grouped_query_attention
from jaxrl_llm.models.partitioning import layout_kernels, layout_kernels_enabled, use_layout
from jaxrl_llm.sharding import TRAIN_RULES, layout, make_mesh
from kernels.attention import causal_attention, splash_tpu, supported

B, T, N, K, H = 2, 256, 4, 2, 32


def _qkv():
    keys = jax.random.split(jax.random.key(0), 3)
    return (jax.random.normal(keys[0], (B, T, N, H)), jax.random.normal(keys[1], (B, T, K, H)),
            jax.random.normal(keys[2], (B, T, K, H)))  # fmt: skip


def _reference(q, k, v, segments, window):
    split = 100  # two packed sequences per row, positions restarting at the second
    positions = jnp.concatenate([jnp.arange(split), jnp.arange(T - split)])[None].repeat(B, 0)
    mask = positions[:, None, :] <= positions[:, :, None]
    mask &= segments[:, None, :] == segments[:, :, None]
    if window:
        mask &= positions[:, :, None] - positions[:, None, :] < window
    return grouped_query_attention(q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), mask)


@pytest.mark.parametrize("window", [None, 48])
def test_matches_xla_attention_with_segments_and_windows(window):
    q, k, v = _qkv()
    segments = jnp.concatenate([jnp.ones((B, 100), jnp.int32), 2 * jnp.ones((B, T - 100),
                               jnp.int32)], axis=1)  # fmt: skip
    scale = 1 / np.sqrt(H)

    def kernel(q):
        return causal_attention(q, k, v, segments, scale=scale, window=window, block=128,
                                interpret=True)  # fmt: skip

    np.testing.assert_allclose(kernel(q), _reference(q, k, v, segments, window), atol=5e-6)
    grad = jax.grad(lambda q: (kernel(q) ** 2).sum())(q)
    want = jax.grad(lambda q: (_reference(q, k, v, segments, window) ** 2).sum())(q)
    np.testing.assert_allclose(grad, want, atol=5e-5)


def test_lengths_the_kernel_cannot_tile():
    assert supported(256) and supported(5120) and not supported(96) and not supported(64)
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="T % 128"):
        causal_attention(q[:, :96], k[:, :96], v[:, :96], scale=1.0)


def _gemma_under_splash(seed: int):
    """(forward, state, tokens, splash layout): Gemma 3's local and global layers on a 1 x 2
    mesh, with the TPU layout's kernels forced into the interpreter. `forward()` returns a fresh
    function each call (its own trace and jit cache)."""
    config = tiny_gemma3_config(sliding_window=64, max_position_embeddings=512)
    graphdef, state = nnx.split(init_model(config))
    tokens = jax.random.randint(jax.random.key(seed), (2, 128), 0, config.vocab_size)
    mesh = make_mesh((1, 2), ("data", "model"), devices=jax.devices()[:2])
    splash = layout(mesh, TRAIN_RULES)._replace(attention="splash", interpret=True)

    def forward():
        return lambda state, tokens: nnx.merge(graphdef, state).hidden_states(tokens)[0]

    return forward, state, tokens, splash


def test_inside_the_model_under_a_splash_layout():
    """The layer scan under a splash layout: the same hidden states as the XLA path."""
    forward, state, tokens, splash = _gemma_under_splash(seed=1)
    want = jax.jit(forward())(state, tokens)
    before = splash_tpu.TRACE_COUNTS["splash"]
    with use_layout(splash):
        got = jax.jit(forward())(state, tokens)
    # Two kernels (global and local) traced inside the layer scan's body.
    assert splash_tpu.TRACE_COUNTS["splash"] >= before + 2
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_attention_kernel_off_traces_the_xla_path():
    """`layout_kernels(False)` under a splash layout: no kernel traced, the same values."""
    forward, state, tokens, splash = _gemma_under_splash(seed=2)
    want = jax.jit(forward())(state, tokens)
    before = splash_tpu.TRACE_COUNTS["splash"]
    with use_layout(splash), layout_kernels(False):
        got = jax.jit(forward())(state, tokens)
    assert splash_tpu.TRACE_COUNTS["splash"] == before
    assert layout_kernels_enabled()  # restored on leaving the block
    np.testing.assert_allclose(got, want, atol=1e-5)
