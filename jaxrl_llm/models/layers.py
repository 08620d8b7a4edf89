"""Building blocks of the decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU / GeGLU.

The Llama family uses them plainly; Gemma 3 ("Gemma 3 Technical Report", arXiv:2503.19786) adds,
through `ModelConfig` fields: sliding-window (local) layers, QK-norm, norms on the attention and
MLP outputs, (1 + scale) norms, GeGLU and a query scale of its own. Every layer keeps one
parameter structure; what differs between local and global layers (window, RoPE frequencies)
arrives as arrays, so the layer scan and the decode engine serve both.

Every parameter is an `nnx.Param` whose metadata `logical_axes` names its dimensions with the
logical axis names below; `jaxrl_llm.sharding` maps those names to mesh axes with one rules table
per layout (train, decode). Logical axis names:

  vocab      V, the vocabulary            embed     D, the residual stream
  heads      N, query heads               kv_heads  K, key/value heads
  head_dim   H, per-head width            mlp       F, the SwiGLU width
  norm       D, of a norm's scale (kept replicated by every rule set)
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrl_llm.models import decode_kernel, partitioning
from jaxrl_llm.models.config import ModelConfig, RopeScaling

Array = jax.Array

_INIT_STDDEV = 0.02  # GPT-2 / Llama reference init for random configs.


def param(rngs: nnx.Rngs | None, shape, dtype, logical_axes, init: str = "normal") -> nnx.Param:
    """Creates an `nnx.Param` tagged with `logical_axes` (one name per dimension)."""
    assert len(shape) == len(logical_axes), (shape, logical_axes)
    if init == "ones":
        value = jnp.ones(shape, dtype)
    elif init == "zeros":
        value = jnp.zeros(shape, dtype)
    else:
        value = (_INIT_STDDEV * jax.random.normal(rngs.params(), shape, jnp.float32)).astype(dtype)
    return nnx.Param(value, logical_axes=tuple(logical_axes))


class RMSNorm(nnx.Module):
    """Root-mean-square norm, computed in float32 (Zhang & Sennrich 2019, arXiv:1910.07467).

    Multiplies by `scale` (Llama, offset 0) or by `1 + scale` (Gemma, offset 1: the stored scale
    starts at 0, as in Hugging Face's Gemma3RMSNorm; the product is taken in float32 there too).
    """

    def __init__(self, dim: int, *, eps: float, dtype, offset: float = 0.0):
        self.eps = eps
        self.offset = offset
        self.scale = param(None, (dim,), dtype, ("norm",), init="zeros" if offset else "ones")

    def __call__(self, x: Array) -> Array:
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        scale = self.scale[...].astype(jnp.float32)
        if self.offset:
            scale = self.offset + scale
        return (normed * scale).astype(x.dtype)


def rms_norm(config: ModelConfig, dim: int) -> RMSNorm:
    """An `RMSNorm` of width `dim` with the config's epsilon, parameter dtype and scale offset."""
    return RMSNorm(
        dim, eps=config.rms_norm_eps, dtype=config.jnp_param_dtype, offset=config.norm_offset
    )


def rope_inverse_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None) -> Array:
    """Inverse frequencies [H/2] of rotary embeddings, with optional Llama-3 scaling.

    See "RoFormer" (arXiv:2104.09864) and "The Llama 3 Herd of Models" (arXiv:2407.21783).
    """
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    if scaling is None:
        return inv_freq
    old_len = scaling.original_max_position_embeddings
    low_wavelen = old_len / scaling.low_freq_factor
    high_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    interpolated = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
    return jnp.where(
        wavelen > low_wavelen,
        inv_freq / scaling.factor,
        jnp.where(wavelen < high_wavelen, inv_freq, interpolated),
    )


def apply_rope(x_btnh: Array, positions_bt: Array, inv_freq_h2: Array) -> Array:
    """Rotates `x` [B, T, N, H] by its positions [B, T], in the "rotate half" layout of HF Llama.

    Dimension i is paired with i + H/2 (GGUF files store the interleaved layout; the GGUF loader
    un-permutes Q and K so this layout holds for every checkpoint).
    """
    angles_bth = positions_bt[..., None].astype(jnp.float32) * inv_freq_h2  # [B, T, H/2]
    cos = jnp.cos(angles_bth)[:, :, None, :]
    sin = jnp.sin(angles_bth)[:, :, None, :]
    x32 = x_btnh.astype(jnp.float32)
    first, second = jnp.split(x32, 2, axis=-1)
    rotated = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return rotated.astype(x_btnh.dtype)


class LayerKV(NamedTuple):
    """One layer's key/value cache: `keys`, `values` [B, K, S, H]; slot s holds position s.

    Heads before slots: attention batches its dots over (batch, kv head), so this layout feeds
    them without transposing the whole cache at every decode step.
    """

    keys: Array
    values: Array


class Attention(nnx.Module):
    """Grouped-query causal self-attention with RoPE, an optional KV cache and sliding window.

    See "GQA: Training Generalized Multi-Query Transformer Models" (arXiv:2305.13245). With
    `config.qk_norm`, queries and keys are RMS-normed over head_dim before RoPE (Gemma 3).
    """

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        d, n, k, h = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
        dt = config.jnp_param_dtype
        self.num_heads, self.num_kv_heads, self.head_dim = n, k, h
        self.q_proj = param(rngs, (d, n, h), dt, ("embed", "heads", "head_dim"))
        self.k_proj = param(rngs, (d, k, h), dt, ("embed", "kv_heads", "head_dim"))
        self.v_proj = param(rngs, (d, k, h), dt, ("embed", "kv_heads", "head_dim"))
        self.o_proj = param(rngs, (n, h, d), dt, ("heads", "head_dim", "embed"))
        if config.attention_bias:
            self.q_bias = param(None, (n, h), dt, ("heads", "head_dim"), init="zeros")
            self.k_bias = param(None, (k, h), dt, ("kv_heads", "head_dim"), init="zeros")
            self.v_bias = param(None, (k, h), dt, ("kv_heads", "head_dim"), init="zeros")
        else:
            self.q_bias = self.k_bias = self.v_bias = None
        if config.qk_norm:
            self.q_norm, self.k_norm = rms_norm(config, h), rms_norm(config, h)
        else:
            self.q_norm = self.k_norm = None
        # Scores are divided by sqrt(query_pre_attn_scalar) (Gemma) or sqrt(head_dim).
        self.score_divisor = math.sqrt(config.query_pre_attn_scalar or h)
        self.sliding_window = config.sliding_window

    def __call__(
        self,
        x_btd: Array,
        positions_bt: Array,
        inv_freq_h2: Array,
        layer_kv: LayerKV | None = None,
        segment_ids_bt: Array | None = None,
        window: Array | None = None,
    ) -> tuple[Array, LayerKV | None]:
        """Attention of `x` [B, T, D] at `positions_bt` [B, T]: ([B, T, D], updated layer cache).

        `window` (int32 scalar, or None for no window) limits each query at position p to keys
        at positions p - window < s <= p, in every path: cache-free, prefill and decode step.
        """
        b, t, _ = x_btd.shape
        n, k, h = self.num_heads, self.num_kv_heads, self.head_dim
        q = project(self, "q_proj", x_btd).reshape(b, t, n, h)
        kk = project(self, "k_proj", x_btd).reshape(b, t, k, h)
        v = project(self, "v_proj", x_btd).reshape(b, t, k, h)
        if self.q_bias is not None:
            q, kk, v = q + self.q_bias[...], kk + self.k_bias[...], v + self.v_bias[...]
        if self.q_norm is not None:
            q, kk = self.q_norm(q), self.k_norm(kk)
        q = apply_rope(q, positions_bt, inv_freq_h2)
        kk = apply_rope(kk, positions_bt, inv_freq_h2)

        if layer_kv is None:
            # A TPU layout's kernel (splash attention), when it can serve this forward.
            out_btnh = partitioning.kernel_attention(
                q, kk, v, segment_ids_bt, window,
                scale=1.0 / self.score_divisor, sliding_window=self.sliding_window,
            )  # fmt: skip
            if out_btnh is not None:
                return project(self, "o_proj", out_btnh.reshape(b, t, n * h)), None
            keys_bksh, values_bksh = kk.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
            key_positions_bs = positions_bt
        else:
            layer_kv = write_cache(layer_kv, kk, v, positions_bt)
            keys_bksh, values_bksh = layer_kv
            if t == 1:
                # One query per row (a decode step): the decode program's attention, a kernel
                # that reads only the filled slots or the masked full-cache XLA path.
                out_bnh = decode_kernel.attend(
                    q[:, 0],
                    keys_bksh,
                    values_bksh,
                    positions_bt[:, 0],
                    window=window,
                    score_divisor=self.score_divisor,
                )
                return project(self, "o_proj", out_bnh.reshape(b, 1, n * h)), layer_kv
            slots = jnp.arange(keys_bksh.shape[2], dtype=positions_bt.dtype)
            key_positions_bs = jnp.broadcast_to(slots, (b, slots.shape[0]))

        # Causal by absolute position. With a cache, slots past a sequence's current position hold
        # stale or padding entries; they are masked here and overwritten before they become causal.
        mask_bts = key_positions_bs[:, None, :] <= positions_bt[:, :, None]
        if window is not None:
            # Sliding window (local layers): keys fewer than `window` positions back.
            mask_bts &= positions_bt[:, :, None] - key_positions_bs[:, None, :] < window
        if segment_ids_bt is not None:
            # Packed rows: a token sees only earlier tokens of its own sequence (segment).
            mask_bts &= segment_ids_bt[:, None, :] == segment_ids_bt[:, :, None]
        out_btnh = grouped_query_attention(
            q, keys_bksh, values_bksh, mask_bts, score_divisor=self.score_divisor
        )
        return project(self, "o_proj", out_btnh.reshape(b, t, n * h)), layer_kv


def project(module: nnx.Module, name: str, x_btd: Array) -> Array:
    """`x` [B, T, D_in] times the module's weight `name`, flattened to [B, T, D_out].

    When a LoRA adapter is attached under `name + "_lora"` (`jaxrl_llm.models.lora`), its
    low-rank update is added: x W + scale * dropout(x) A B, without forming W + scale * A B.
    """
    y_btf = dense(x_btd, getattr(module, name)[...])
    adapter = getattr(module, name + "_lora", None)
    return y_btf if adapter is None else y_btf + adapter(x_btd)


def dense(x_btd: Array, w: Array) -> Array:
    """`x` [B, T, D_in] times a weight whose leading dims flatten to D_in: [B, T, D_out].

    One 2-D matmul [B*T, D_in] x [D_in, D_out] on row-major reshapes (bitcasts, no copies) of
    both operands. XLA:CPU runs it as a single GEMM; the equivalent multi-axis einsums
    (`btd,dnh->btnh`, `btnh,nhd->btd`) were lowered with transposes, of the weight among them,
    inside the decode loop (see experiments/benchmarks/forward.py).
    """
    b, t, d_in = x_btd.shape
    w_2d = w.reshape(d_in, -1)
    return jnp.dot(x_btd.reshape(b * t, d_in), w_2d).reshape(b, t, w_2d.shape[1])


def write_cache(layer_kv: LayerKV, k_btkh: Array, v_btkh: Array, positions_bt: Array) -> LayerKV:
    """Writes keys and values [B, T, K, H] at their absolute positions (slot = position).

    Positions past the cache end are dropped rather than wrapped. Indexing [b, :, s] puts the
    indexed dims first, so the update is [B, T, K, H] like the new keys and values.
    """
    batch_index_bt = jnp.broadcast_to(jnp.arange(k_btkh.shape[0])[:, None], positions_bt.shape)
    keys = layer_kv.keys.at[batch_index_bt, :, positions_bt].set(
        k_btkh.astype(layer_kv.keys.dtype), mode="drop"
    )
    values = layer_kv.values.at[batch_index_bt, :, positions_bt].set(
        v_btkh.astype(layer_kv.values.dtype), mode="drop"
    )
    return LayerKV(keys, values)


def grouped_query_attention(
    q_btnh: Array,
    k_bksh: Array,
    v_bksh: Array,
    mask_bts: Array,
    *,
    score_divisor: float | None = None,
) -> Array:
    """Softmax attention where each of K key/value heads serves N // K query heads.

    Scores and softmax in float32. A query with no visible key (only possible for padding rows)
    gets uniform weights instead of NaN.

    Args:
      q_btnh: queries [B, T, N, H].
      k_bksh, v_bksh: keys and values [B, K, S, H] (the KV cache layout).
      mask_bts: bool [B, T, S], True where query t may attend to key s.
      score_divisor: scores are divided by it; None: sqrt(H).

    Returns:
      [B, T, N, H] in the dtype of `q`.
    """
    b, t, n, h = q_btnh.shape
    kv_heads = k_bksh.shape[1]
    q_btkgh = q_btnh.reshape(b, t, kv_heads, n // kv_heads, h)
    scores = jnp.einsum(
        "btkgh,bksh->bkgts",
        q_btkgh,
        k_bksh.astype(q_btnh.dtype),
        preferred_element_type=jnp.float32,
    ) / (score_divisor or math.sqrt(h))
    scores = jnp.where(mask_bts[:, None, None, :, :], scores, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1).astype(q_btnh.dtype)
    out = jnp.einsum("bkgts,bksh->btkgh", weights, v_bksh.astype(q_btnh.dtype))
    return out.reshape(b, t, n, h)


# Gate activations of the gated MLP, by `ModelConfig.mlp_activation`.
_GATE_ACTIVATIONS = {
    "silu": jax.nn.silu,  # SwiGLU (Llama)
    "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),  # GeGLU (Gemma)
}


class SwiGLU(nnx.Module):
    """down(act(gate(x)) * up(x)): SwiGLU (act = silu) or GeGLU (act = gelu, tanh approximation,
    as Gemma's `gelu_pytorch_tanh`). See "GLU Variants Improve Transformer" (arXiv:2002.05202).
    """

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        d, f, dt = config.hidden_size, config.intermediate_size, config.jnp_param_dtype
        self.activation = config.mlp_activation
        self.gate_proj = param(rngs, (d, f), dt, ("embed", "mlp"))
        self.up_proj = param(rngs, (d, f), dt, ("embed", "mlp"))
        self.down_proj = param(rngs, (f, d), dt, ("mlp", "embed"))

    def __call__(self, x_btd: Array) -> Array:
        """[B, T, D] -> [B, T, D]."""
        gate = project(self, "gate_proj", x_btd)
        up = project(self, "up_proj", x_btd)
        return project(self, "down_proj", _GATE_ACTIVATIONS[self.activation](gate) * up)


class DecoderLayer(nnx.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x)).

    `post_attention_norm` is the norm before the MLP (Hugging Face Llama's name). With
    `config.post_norms` (Gemma 3) the block is x + norm(attn(norm(x))), then
    x + norm(mlp(norm(x))): `attention_output_norm` and `mlp_output_norm` norm the branch outputs.
    """

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        d = config.hidden_size
        self.input_norm = rms_norm(config, d)
        self.attention = Attention(config, rngs=rngs)
        self.post_attention_norm = rms_norm(config, d)
        self.mlp = SwiGLU(config, rngs=rngs)
        if config.post_norms:
            self.attention_output_norm, self.mlp_output_norm = (
                rms_norm(config, d),
                rms_norm(config, d),
            )
        else:
            self.attention_output_norm = self.mlp_output_norm = None

    def __call__(
        self, x_btd, positions_bt, inv_freq_h2, layer_kv=None, segment_ids_bt=None, window=None
    ):
        """x [B, T, D] -> (x [B, T, D], updated layer cache); arguments as `Attention`'s."""
        attn_out, layer_kv = self.attention(
            self.input_norm(x_btd), positions_bt, inv_freq_h2, layer_kv, segment_ids_bt, window
        )
        if self.attention_output_norm is not None:
            attn_out = self.attention_output_norm(attn_out)
        x_btd = x_btd + attn_out
        mlp_out = self.mlp(self.post_attention_norm(x_btd))
        if self.mlp_output_norm is not None:
            mlp_out = self.mlp_output_norm(mlp_out)
        return x_btd + mlp_out, layer_kv
