"""The NNX transformer on tiny random configs: shapes, causality, cache equivalence, RoPE."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.models import ModelConfig, RopeScaling, init_model, tiny_config
from jaxrl_llm.models.layers import apply_rope, rope_inverse_frequencies


def test_logits_shape_and_causality():
    model = init_model(tiny_config(), seed=0)
    tokens = jnp.asarray([[5, 9, 3, 7, 1], [2, 2, 8, 4, 6]], jnp.int32)
    logits = model(tokens)
    assert logits.shape == (2, 5, 256) and logits.dtype == jnp.float32
    changed = tokens.at[:, 3].set(100)
    logits2 = model(changed)
    # Positions before the change see the same prefix: identical logits; position 3 differs.
    np.testing.assert_array_equal(np.asarray(logits[:, :3]), np.asarray(logits2[:, :3]))
    assert np.abs(np.asarray(logits[:, 3] - logits2[:, 3])).max() > 1e-4


def test_cached_decode_equals_full_forward():
    model = init_model(tiny_config(attention_bias=True, tie_word_embeddings=False), seed=1)
    tokens = jax.random.randint(jax.random.PRNGKey(0), (2, 9), 0, 256)
    full = model(tokens)
    cache = model.init_cache(2, 16)
    hidden, cache = model.hidden_states(tokens[:, :6], kv_cache=cache)
    pieces = [model.logits(hidden)]
    for t in range(6, 9):
        pos = jnp.full((2, 1), t, jnp.int32)
        hidden, cache = model.hidden_states(tokens[:, t : t + 1], positions_bt=pos, kv_cache=cache)
        pieces.append(model.logits(hidden))
    np.testing.assert_allclose(np.concatenate(pieces, 1), np.asarray(full), atol=2e-5, rtol=2e-5)


def test_ragged_prefill_padding_is_never_seen():
    """Row 1 is prefilled with 3 pad tokens after its 3-token prompt; decoding overwrites them."""
    model = init_model(tiny_config(), seed=2)
    prompt = jnp.asarray([[11, 12, 13]], jnp.int32)
    cache = model.init_cache(1, 8)
    padded = jnp.asarray([[11, 12, 13, 99, 98, 97]], jnp.int32)
    _, cache = model.hidden_states(padded, kv_cache=cache)
    pos = jnp.asarray([[3]], jnp.int32)
    h, _ = model.hidden_states(jnp.asarray([[42]]), positions_bt=pos, kv_cache=cache)
    reference = model(jnp.concatenate([prompt, jnp.asarray([[42]])], 1))[:, -1]
    np.testing.assert_allclose(np.asarray(model.logits(h)[:, 0]), np.asarray(reference), atol=2e-5)


def test_rope_rotation_preserves_norm_and_relative_position():
    inv = rope_inverse_frequencies(8, 10000.0, None)
    q = jax.random.normal(jax.random.PRNGKey(0), (1, 1, 1, 8))
    k = jax.random.normal(jax.random.PRNGKey(1), (1, 1, 1, 8))

    def dot(pq, pk):
        rq = apply_rope(q, jnp.asarray([[pq]]), inv)
        rk = apply_rope(k, jnp.asarray([[pk]]), inv)
        return float(jnp.sum(rq * rk))

    np.testing.assert_allclose(dot(5, 2), dot(13, 10), rtol=1e-5)  # depends on 5-2 only
    rotated = apply_rope(q, jnp.asarray([[7]]), inv)
    np.testing.assert_allclose(
        float(jnp.linalg.norm(rotated)), float(jnp.linalg.norm(q)), rtol=1e-6
    )
    # Position 0 is the identity rotation.
    np.testing.assert_allclose(np.asarray(apply_rope(q, jnp.asarray([[0]]), inv)), np.asarray(q))


def test_llama3_rope_scaling_hand_values():
    # head_dim 4, theta 10000: inv_freq = [1, 0.01]; wavelengths 2*pi ~ 6.28 and 628.3.
    # With original_max_position_embeddings=64, low_freq_factor=1 (wavelen > 64 is scaled by 1/factor)
    # and high_freq_factor=32 (wavelen < 2 kept): 6.28 lies between -> interpolated; 628 > 64 -> /8.
    s = RopeScaling(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=32.0, original_max_position_embeddings=64
    )
    inv = np.asarray(rope_inverse_frequencies(4, 10000.0, s))
    smooth = (64 / (2 * np.pi) - 1.0) / (32.0 - 1.0)  # = 0.29633
    np.testing.assert_allclose(inv[0], (1 - smooth) * 1.0 / 8 + smooth * 1.0, rtol=1e-6)
    np.testing.assert_allclose(inv[1], 0.01 / 8, rtol=1e-6)


def test_bfloat16_model_runs_and_tracks_float32():
    config = tiny_config()
    model32 = init_model(config, seed=3)
    model16 = init_model(config.replace(dtype="bfloat16"), seed=3)
    assert model16.embed[...].dtype == jnp.bfloat16
    tokens = jnp.asarray([[1, 2, 3, 4]], jnp.int32)
    out16 = np.asarray(model16(tokens), np.float32)
    out32 = np.asarray(model32(tokens))
    assert np.abs(out16 - out32).max() < 0.05  # bf16 has ~3 significant digits; logits are O(1)


def test_every_parameter_has_logical_axes():
    model = init_model(tiny_config(attention_bias=True, tie_word_embeddings=False), seed=0)
    leaves = jax.tree.leaves(
        nnx.state(model, nnx.Param), is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    assert len(leaves) == 1 + 1 + 1 + 2 * (2 + 4 + 3 + 3)
    for var in leaves:
        axes = var.get_metadata()["logical_axes"]
        assert len(axes) == var.get_value().ndim, (axes, var.get_value().shape)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(hidden_size=60, num_heads=7), "hidden_size=60 is not divisible by num_heads=7"),
        (dict(num_heads=4, num_kv_heads=3), "num_kv_heads=3 must divide num_heads=4"),
        (dict(dtype="float64"), "dtype='float64'"),
        (dict(num_layers=0), "num_layers=0 must be a positive integer"),
    ],
)
def test_bad_config_names_the_field(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        tiny_config(**fields)


def test_num_params_counts_the_built_model():
    for config in (tiny_config(), tiny_config(attention_bias=True, tie_word_embeddings=False)):
        model = init_model(config)
        leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
        assert sum(x.size for x in leaves) == config.num_params()


def test_model_is_jittable_and_second_call_does_not_retrace():
    model = init_model(tiny_config(), seed=0)
    graphdef, state = nnx.split(model)
    traces = []

    @jax.jit
    def forward(state, tokens):
        traces.append(1)
        return nnx.merge(graphdef, state)(tokens)

    tokens = jnp.ones((2, 4), jnp.int32)
    np.testing.assert_allclose(
        np.asarray(forward(state, tokens)), np.asarray(model(tokens)), atol=1e-6
    )
    forward(state, tokens + 1)
    assert len(traces) == 1


def test_config_replace_is_validated():
    with pytest.raises(ValueError, match="num_kv_heads"):
        ModelConfig(
            vocab_size=8,
            hidden_size=8,
            intermediate_size=8,
            num_layers=1,
            num_heads=2,
            num_kv_heads=4,
        )


def test_remat_changes_memory_not_values_or_gradients():
    model = init_model(tiny_config(), seed=4)
    graphdef, state = nnx.split(model)
    tokens = jax.random.randint(jax.random.PRNGKey(2), (2, 6), 0, 256)

    def loss(state, remat):
        hidden, _ = nnx.merge(graphdef, state).hidden_states(tokens, remat=remat)
        return jnp.sum(hidden**2)

    np.testing.assert_allclose(float(loss(state, True)), float(loss(state, False)), rtol=1e-6)
    g1, g2 = jax.grad(loss)(state, True), jax.grad(loss)(state, False)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6),
        g1,
        g2,
    )
