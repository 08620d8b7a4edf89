"""The decoder-only transformer as a Flax NNX module.

Covers Llama 2/3 (RoPE with Llama-3 scaling), SmolLM2 (tied embeddings), Qwen2 (QKV bias) and
Gemma 3 (5 local : 1 global layers, QK-norm, sandwich norms, GeGLU, scaled embeddings).
See "LLaMA: Open and Efficient Foundation Language Models" (arXiv:2302.13971),
"Qwen2 Technical Report" (arXiv:2407.10671) and "Gemma 3 Technical Report" (arXiv:2503.19786).

Three entry points share one forward:
  model(tokens_bt)                       -> logits [B, T, V], causal, positions 0..T-1
  model.hidden_states(tokens_bt, ...)    -> (final-normed hidden [B, T, D], updated KV cache)
  model.unembed_matrix()                 -> [D, V], for the fused log-prob kernel (no [B, T, V])
The decode engine passes `positions_bt` and a `KVCache` to `hidden_states`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrl_llm.models import partitioning
from jaxrl_llm.models.config import GLOBAL_ATTENTION, LOCAL_ATTENTION, ModelConfig
from jaxrl_llm.models.layers import (
    DecoderLayer,
    LayerKV,
    param,
    rms_norm,
    rope_inverse_frequencies,
)

Array = jax.Array

# Logical axes of a KV cache array [B, K, S, H], for the sharding rule sets.
KV_CACHE_LOGICAL_AXES = ("cache_batch", "kv_heads", "cache_sequence", "head_dim")

# The window of a global layer when some layers are local: larger than any position difference.
NO_WINDOW = jnp.iinfo(jnp.int32).max


class KVCache(NamedTuple):
    """Preallocated keys and values of every layer: a tuple of L `LayerKV`, each [B, K, S, H].

    Slot s of row b holds position s of that sequence (prompts are left-aligned). Which slots are
    valid is the decode loop's business (it tracks per-sequence lengths); attention only reads
    slots at or before each query's position.
    """

    layers: tuple[LayerKV, ...]

    @property
    def max_length(self) -> int:
        """S, the number of slots per sequence."""
        return self.layers[0].keys.shape[2]


class Transformer(nnx.Module):
    """Decoder-only transformer: embed -> L x DecoderLayer -> RMSNorm -> unembed.

    Args:
      config: the architecture.
      rngs: random streams for the initial parameters (loaders overwrite them).

    Example:
      >>> model = Transformer(tiny_config(), rngs=nnx.Rngs(0))
      >>> logits = model(jnp.zeros((2, 5), jnp.int32))  # [2, 5, 256]
    """

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        dt = config.jnp_param_dtype  # programs cast to config.dtype (models.precision)
        self.embed = param(rngs, (config.vocab_size, config.hidden_size), dt, ("vocab", "embed"))
        self.layers = nnx.List([DecoderLayer(config, rngs=rngs) for _ in range(config.num_layers)])
        self.final_norm = rms_norm(config, config.hidden_size)
        if config.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = param(
                rngs, (config.hidden_size, config.vocab_size), dt, ("embed", "vocab")
            )

    def __call__(self, tokens_bt: Array, *, positions_bt: Array | None = None) -> Array:
        """Causal logits [B, T, V] (model dtype) of int32 `tokens_bt` [B, T]."""
        hidden_btd, _ = self.hidden_states(tokens_bt, positions_bt=positions_bt)
        return self.logits(hidden_btd)

    def hidden_states(
        self,
        tokens_bt: Array,
        *,
        positions_bt: Array | None = None,
        kv_cache: KVCache | None = None,
        remat: bool | str = False,
        segment_ids_bt: Array | None = None,
        scan_layers: bool = True,
    ) -> tuple[Array, KVCache | None]:
        """Final-normed hidden states, optionally reading and writing a KV cache.

        Args:
          tokens_bt: int32 [B, T].
          positions_bt: int32 [B, T] absolute positions; defaults to 0..T-1 in every row. With a
            cache, token (b, t) is written to slot positions_bt[b, t] and attends to slots <= it.
          kv_cache: a `KVCache` from `init_cache`, or None for a cache-free causal forward.
          remat: what the backward pass keeps of each layer (gradient checkpointing), one of
            `REMAT_POLICIES`: "none" (False) keeps every activation; "full" (True) keeps one
            [B, T, D] per layer and recomputes the rest, about a third more compute; "dots"
            keeps the outputs of the weight matmuls and recomputes attention, norms and
            activations. Only without a cache.
          segment_ids_bt: int32 [B, T] for packed rows (several sequences per row, each with
            its own positions from 0): a token attends only to tokens of the same segment id.
            Only without a cache. See `jaxrl_llm.training.packing`.
          scan_layers: run a cache-free forward as one `lax.scan` over the layers (their
            parameters stacked on the fly) instead of L unrolled copies: the program compiles
            once per layer instead of L times, and under `remat` the recomputation stays inside
            the backward loop. Forwards with a cache (decode) always unroll.

        Returns:
          (hidden [B, T, D] in the model dtype, the updated cache or None).
        """
        if tokens_bt.ndim != 2:
            raise ValueError(f"tokens must be [batch, time] int32, got shape {tokens_bt.shape}.")
        b, t = tokens_bt.shape
        # Attention kernels mask by index: valid when positions are indices of each row or of
        # each packed segment (`partitioning.kernel_attention`).
        index_positions = kv_cache is None and (positions_bt is None or segment_ids_bt is not None)
        if positions_bt is None:
            positions_bt = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        elif positions_bt.shape != tokens_bt.shape:
            raise ValueError(
                f"positions_bt {positions_bt.shape} must match tokens_bt {tokens_bt.shape}."
            )
        if segment_ids_bt is not None:
            if kv_cache is not None:
                raise ValueError("segment_ids_bt (packed rows) is for cache-free forwards only.")
            if segment_ids_bt.shape != tokens_bt.shape:
                raise ValueError(
                    f"segment_ids_bt {segment_ids_bt.shape} must match tokens_bt {tokens_bt.shape}."
                )
        if kv_cache is not None and len(kv_cache.layers) != len(self.layers):
            raise ValueError(
                f"kv_cache has {len(kv_cache.layers)} layers, the model {len(self.layers)}."
            )
        with partitioning.index_positions(index_positions):
            return self._layers_forward(
                tokens_bt, positions_bt, kv_cache, remat, segment_ids_bt, scan_layers
            )

    def _layers_forward(self, tokens_bt, positions_bt, kv_cache, remat, segment_ids_bt, scan):
        inv_freq_lh2, windows_l = layer_rope_and_windows(self.config)
        policy = remat_policy(remat)
        x_btd = self.embed_tokens(tokens_bt)
        if kv_cache is None and scan and len(self.layers) > 1:
            x_btd = _scan_layers(
                self.layers, x_btd, positions_bt, inv_freq_lh2, windows_l, segment_ids_bt, policy
            )
            return self.final_norm(x_btd), None
        new_layers, layer_forward = [], _layer_forward(policy)
        for i, layer in enumerate(self.layers):
            inv_freq, window = inv_freq_lh2[i], None if windows_l is None else windows_l[i]
            if kv_cache is None:
                x_btd = layer_forward(layer, x_btd, positions_bt, inv_freq, segment_ids_bt, window)
                continue
            x_btd, layer_kv = layer(
                x_btd, positions_bt, inv_freq, kv_cache.layers[i], window=window
            )
            new_layers.append(layer_kv)
        hidden_btd = self.final_norm(x_btd)
        return hidden_btd, (None if kv_cache is None else KVCache(tuple(new_layers)))

    def embed_tokens(self, tokens_bt: Array) -> Array:
        """Token embeddings [B, T, D] of int32 `tokens_bt` [B, T], in the model dtype.

        With `config.scale_embeddings` (Gemma) they are multiplied by sqrt(D) rounded to the model
        dtype first, as Hugging Face's Gemma3TextScaledWordEmbedding does.
        """
        x_btd = jnp.take(self.embed[...], tokens_bt, axis=0)
        if self.config.scale_embeddings:
            x_btd = x_btd * jnp.asarray(self.config.hidden_size**0.5, jnp.float32).astype(
                x_btd.dtype
            )
        return x_btd

    def unembed_matrix(self) -> Array:
        """The output projection [D, V] (the transposed embedding when tied)."""
        if self.lm_head is None:
            return self.embed[...].T
        return self.lm_head[...]

    def logits(self, hidden_btd: Array) -> Array:
        """Logits [B, T, V] of hidden states [B, T, D], in the model dtype."""
        return jnp.einsum("btd,dv->btv", hidden_btd, self.unembed_matrix())

    def init_cache(self, batch_size: int, max_length: int, dtype=None) -> KVCache:
        """A zero KV cache with `max_length` slots per sequence, [B, K, S, H] per layer."""
        config = self.config
        shape = (batch_size, config.num_kv_heads, max_length, config.head_dim)
        dtype = dtype or config.jnp_dtype
        return KVCache(
            tuple(
                LayerKV(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))
                for _ in range(config.num_layers)
            )
        )


# Checkpoint policies of `hidden_states(remat=...)`: what a layer's backward pass keeps.
REMAT_POLICIES = ("none", "full", "dots")


def remat_policy(remat: bool | str) -> str:
    """The policy name of a `remat` argument (True -> "full", False -> "none")."""
    if remat is True:
        return "full"
    if remat is False or remat is None:
        return "none"
    if remat not in REMAT_POLICIES:
        raise ValueError(f"remat={remat!r} must be a bool or one of {REMAT_POLICIES}.")
    return remat


def _checkpoint_policy(policy: str):
    """The `jax.checkpoint` saveable-policy of a named remat policy (None: save nothing)."""
    if policy == "dots":
        # The weight matmuls are the 2-D dots (no batch dimensions); attention's dots batch
        # over (row, kv head) and are recomputed with the cheap elementwise work.
        return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    return None


def layer_rope_and_windows(config: ModelConfig) -> tuple[Array, Array | None]:
    """What differs between layers of one structure: RoPE frequencies and attention window.

    Gemma 3's local layers rotate with base `rope_local_theta` (10k) and see `sliding_window`
    positions; its global layers rotate with `rope_theta` (1M) and see everything.

    Returns:
      (inverse frequencies float32 [L, H/2], windows int32 [L] with `NO_WINDOW` for global
      layers, or None when no layer is local).
    """
    global_inv = rope_inverse_frequencies(config.head_dim, config.rope_theta, config.rope_scaling)
    local_inv = global_inv
    if config.rope_local_theta is not None:
        local_inv = rope_inverse_frequencies(config.head_dim, config.rope_local_theta, None)
    types = config.layer_types or (GLOBAL_ATTENTION,) * config.num_layers
    is_local_l = jnp.asarray([kind == LOCAL_ATTENTION for kind in types])
    inv_freq_lh2 = jnp.where(is_local_l[:, None], local_inv[None], global_inv[None])
    if not config.has_local_layers:
        return inv_freq_lh2, None
    windows_l = jnp.where(is_local_l, config.sliding_window, NO_WINDOW).astype(jnp.int32)
    return inv_freq_lh2, windows_l


def _cache_free_layer(
    layer: DecoderLayer, x_btd, positions_bt, inv_freq_h2, segment_ids_bt, window=None
):
    return layer(x_btd, positions_bt, inv_freq_h2, None, segment_ids_bt, window)[0]


def _layer_forward(policy: str):
    """One cache-free layer `(layer, x, positions, inv_freq, segment_ids, window) -> x` under
    `policy`."""
    if policy == "none":
        return _cache_free_layer
    return nnx.remat(_cache_free_layer, policy=_checkpoint_policy(policy))


def _scan_layers(layers, x_btd, positions_bt, inv_freq_lh2, windows_l, segment_ids_bt, policy: str):
    """x [B, T, D] through every layer as one `lax.scan` over their stacked parameters.

    The layers share one structure; their states are stacked along a new leading axis inside
    the traced program (an [L, ...] copy of the layer weights, small next to a train step's
    activations), and the gradient flows back through the stack to each layer's parameters.
    Per-layer RoPE frequencies [L, H/2] and windows [L] (or None) are scanned with them.
    """
    graphdef, first = nnx.split(layers[0])
    stacked = jax.tree.map(
        lambda *xs: jnp.stack(xs), first, *(nnx.split(layer)[1] for layer in layers[1:])
    )
    # Under a layout (`partitioning.use_layout`): the stack stays in the stored (FSDP) layout
    # and each iteration gathers its own layer's weights, so one layer is gathered at a time.
    stacked = partitioning.constrain_params(stacked, gathered=False, leading_axes=1)

    def body(x, per_layer):
        layer_state, inv_freq_h2, window = per_layer
        layer_state = partitioning.constrain_params(layer_state, gathered=True)
        layer = nnx.merge(graphdef, layer_state)
        x = layer(x, positions_bt, inv_freq_h2, None, segment_ids_bt, window)[0]
        return partitioning.constrain(x, ("batch", None, None)), None

    if policy != "none":
        body = jax.checkpoint(body, policy=_checkpoint_policy(policy))
    x_btd, _ = jax.lax.scan(body, x_btd, (stacked, inv_freq_lh2, windows_l))
    return x_btd


def init_model(config: ModelConfig, seed: int = 0) -> Transformer:
    """A randomly initialised `Transformer` (for tests, benchmarks and from-scratch runs)."""
    return Transformer(config, rngs=nnx.Rngs(params=seed))
