"""Hyper-parameters of the decoder families: Llama 2/3, SmolLM2, Qwen2 and Gemma 3.

One frozen dataclass describes every architecture the loaders read; `validate()` runs in
`__post_init__`, so a config that cannot build a model fails where it is written, with the field
named and the fix suggested.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}

# Per-layer attention kinds (Hugging Face's `layer_types` names).
GLOBAL_ATTENTION, LOCAL_ATTENTION = "full_attention", "sliding_attention"
LAYER_TYPES = (GLOBAL_ATTENTION, LOCAL_ATTENTION)
# MLP gate activations: SwiGLU (Llama) and GeGLU with gelu's tanh approximation (Gemma).
MLP_ACTIVATIONS = ("silu", "gelu_tanh")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama-3 RoPE frequency scaling ("rope_type": "llama3" in Hugging Face configs).

    See "The Llama 3 Herd of Models" (arXiv:2407.21783): wavelengths longer than
    `original_max_position_embeddings / low_freq_factor` are divided by `factor`, those shorter than
    `original_max_position_embeddings / high_freq_factor` are kept, and the band between is interpolated.
    """

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of a decoder-only Llama-family transformer.

    Glossary used in shapes across the package: B batch, T tokens, S cache slots, D hidden size,
    N query heads, K key/value heads, H head dimension, F MLP width, V vocabulary, L layers.

    Attributes:
      vocab_size: V.
      hidden_size: D.
      intermediate_size: F, the SwiGLU width.
      num_layers: L.
      num_heads: N query heads.
      num_kv_heads: K key/value heads (grouped-query attention); must divide N.
      head_dim: H; defaults to D // N.
      rope_theta: RoPE base frequency.
      rope_scaling: Llama-3 frequency scaling, or None.
      rms_norm_eps: epsilon inside RMSNorm.
      tie_word_embeddings: unembed with the transposed token embedding (SmolLM2) instead of a head.
      attention_bias: bias on the Q, K and V projections (Qwen2).
      max_position_embeddings: the longest context the model was trained for (informational).
      dtype: "float32" or "bfloat16": the compute dtype (activations, the KV cache, the weights a
        program reads). Log-softmax always upcasts.
      param_dtype: the dtype the parameters are stored and trained in; None: `dtype`. "float32"
        under a "bfloat16" `dtype` is mixed precision: a float32 master copy (and float32
        optimizer state) that every program casts to `dtype` on entry
        (`jaxrl_llm.models.precision`), so gradients reach the float32 weights.
      bos_token_id, eos_token_id: ids from the checkpoint, for tokenizers that do not name them.

    Gemma 3 fields ("Gemma 3 Technical Report", arXiv:2503.19786); the defaults give Llama:
      layer_types: per layer "full_attention" (global) or "sliding_attention" (local, attends to
        the `sliding_window` latest positions); None: every layer global. Gemma 3 interleaves
        5 local : 1 global (`interleaved_layer_types`).
      sliding_window: W; a local layer's query at position p sees keys at p - W < s <= p.
      rope_local_theta: RoPE base frequency of local layers (Gemma 3: 10k; `rope_theta` is the
        global layers', 1M); None: `rope_theta` for every layer.
      qk_norm: RMSNorm over head_dim on queries and keys, before RoPE.
      post_norms: RMSNorm on the attention and the MLP outputs before each residual add
        (4 norms a layer: "sandwich" norms).
      norm_offset: RMSNorm multiplies by (norm_offset + scale); Gemma's 1.0 (its scales are stored
        as offsets from 1, in Hugging Face checkpoints and in ours).
      mlp_activation: "silu" (SwiGLU) or "gelu_tanh" (GeGLU, gelu's tanh approximation).
      scale_embeddings: multiply the token embeddings by sqrt(hidden_size), in the model dtype.
      query_pre_attn_scalar: attention scores are divided by sqrt(query_pre_attn_scalar);
        None: by sqrt(head_dim).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    max_position_embeddings: int = 8192
    dtype: str = "float32"
    param_dtype: str | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None
    rope_local_theta: float | None = None
    qk_norm: bool = False
    post_norms: bool = False
    norm_offset: float = 0.0
    mlp_activation: str = "silu"
    scale_embeddings: bool = False
    query_pre_attn_scalar: float | None = None

    def __post_init__(self):
        if self.layer_types is not None:  # JSON round trips give lists; keep the config hashable
            object.__setattr__(self, "layer_types", tuple(self.layer_types))
        if self.param_dtype == self.dtype:  # one spelling of "parameters in the compute dtype"
            object.__setattr__(self, "param_dtype", None)
        if self.head_dim is None:
            if self.num_heads <= 0 or self.hidden_size % self.num_heads:
                raise ValueError(
                    f"ModelConfig: hidden_size={self.hidden_size} is not divisible by "
                    f"num_heads={self.num_heads}; choose num_heads that divides hidden_size "
                    "or set head_dim explicitly."
                )
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first inconsistent field."""
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"ModelConfig: {name}={value!r} must be a positive integer.")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig: num_kv_heads={self.num_kv_heads} must divide "
                f"num_heads={self.num_heads} (grouped-query attention shares each KV head "
                "among num_heads // num_kv_heads query heads)."
            )
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig: head_dim={self.head_dim} must be even for RoPE.")
        if self.dtype not in _DTYPES:
            raise ValueError(f"ModelConfig: dtype={self.dtype!r} is not one of {sorted(_DTYPES)}.")
        if self.param_dtype is not None:
            if self.param_dtype not in _DTYPES:
                raise ValueError(
                    f"ModelConfig: param_dtype={self.param_dtype!r} is not one of "
                    f"{sorted(_DTYPES)} (or None for dtype={self.dtype!r})."
                )
            if jnp.finfo(self.jnp_param_dtype).nmant < jnp.finfo(self.jnp_dtype).nmant:
                raise ValueError(
                    f"ModelConfig: param_dtype={self.param_dtype!r} is narrower than "
                    f"dtype={self.dtype!r}; store parameters at least as precisely as programs "
                    f"compute (param_dtype={self.dtype!r} or 'float32')."
                )
        if self.rms_norm_eps <= 0:
            raise ValueError(f"ModelConfig: rms_norm_eps={self.rms_norm_eps} must be > 0.")
        self._validate_gemma_fields()

    def _validate_gemma_fields(self) -> None:
        if self.layer_types is not None:
            if len(self.layer_types) != self.num_layers:
                raise ValueError(
                    f"ModelConfig: layer_types has {len(self.layer_types)} entries but "
                    f"num_layers={self.num_layers}; give one per layer."
                )
            bad = sorted(set(self.layer_types) - set(LAYER_TYPES))
            if bad:
                raise ValueError(f"ModelConfig: layer_types holds {bad}, not one of {LAYER_TYPES}.")
        if self.has_local_layers and (
            not isinstance(self.sliding_window, int) or self.sliding_window <= 0
        ):
            raise ValueError(
                f"ModelConfig: sliding_window={self.sliding_window!r} must be a positive integer "
                f"when layer_types has {LOCAL_ATTENTION!r} layers."
            )
        if self.sliding_window is not None and not self.has_local_layers:
            raise ValueError(
                f"ModelConfig: sliding_window={self.sliding_window} is set but no layer is "
                f"local; mark the local layers in layer_types ({LOCAL_ATTENTION!r})."
            )
        if self.mlp_activation not in MLP_ACTIVATIONS:
            raise ValueError(
                f"ModelConfig: mlp_activation={self.mlp_activation!r} is not one of "
                f"{MLP_ACTIVATIONS}."
            )
        if self.norm_offset not in (0.0, 1.0):
            raise ValueError(
                f"ModelConfig: norm_offset={self.norm_offset} must be 0.0 (Llama) or 1.0 (Gemma)."
            )
        if self.query_pre_attn_scalar is not None and self.query_pre_attn_scalar <= 0:
            raise ValueError(
                f"ModelConfig: query_pre_attn_scalar={self.query_pre_attn_scalar} must be > 0 "
                "(or None for head_dim)."
            )
        if self.rope_local_theta is not None and self.rope_local_theta <= 0:
            raise ValueError(f"ModelConfig: rope_local_theta={self.rope_local_theta} must be > 0.")

    @property
    def has_local_layers(self) -> bool:
        """Whether any layer uses sliding-window (local) attention."""
        return self.layer_types is not None and LOCAL_ATTENTION in self.layer_types

    @property
    def jnp_dtype(self):
        """The jnp dtype named by `dtype`: what programs compute in."""
        return _DTYPES[self.dtype]

    @property
    def jnp_param_dtype(self):
        """The jnp dtype parameters are stored in (`param_dtype`, else `dtype`)."""
        return _DTYPES[self.param_dtype or self.dtype]

    @property
    def mixed_precision(self) -> bool:
        """Whether parameters are stored wider than programs compute (a master copy)."""
        return self.jnp_param_dtype != self.jnp_dtype

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Number of parameters the model built from this config holds."""
        d, f, h = self.hidden_size, self.intermediate_size, self.head_dim
        n, k = self.num_heads, self.num_kv_heads
        attn = d * n * h + 2 * d * k * h + n * h * d
        if self.attention_bias:
            attn += n * h + 2 * k * h
        layer = attn + 3 * d * f + 2 * d
        layer += 2 * h if self.qk_norm else 0
        layer += 2 * d if self.post_norms else 0
        head = 0 if self.tie_word_embeddings else d * self.vocab_size
        return self.vocab_size * d + self.num_layers * layer + d + head


def interleaved_layer_types(num_layers: int, global_every: int = 6) -> tuple[str, ...]:
    """Gemma 3's pattern: every `global_every`-th layer global, the others local (5 : 1).

    Example:
      >>> interleaved_layer_types(7)[4:]
      ('sliding_attention', 'full_attention', 'sliding_attention')
    """
    return tuple(
        GLOBAL_ATTENTION if (i + 1) % global_every == 0 else LOCAL_ATTENTION
        for i in range(num_layers)
    )


def tiny_config(**overrides: Any) -> ModelConfig:
    """A small random-weight config for tests and notebooks (2 layers, D=64, V=256)."""
    fields = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        max_position_embeddings=512,
    )
    fields.update(overrides)
    return ModelConfig(**fields)


def tiny_gemma3_config(**overrides: Any) -> ModelConfig:
    """A small random-weight Gemma-3-style config for tests: 4 layers (local, local, global,
    local), window 4, QK-norm, sandwich norms, GeGLU, (1 + scale) norms, scaled embeddings."""
    fields = dict(  # `tiny_config`'s sizes, with Gemma's features
        num_layers=4,
        head_dim=32,
        rope_theta=1_000_000.0,
        rope_local_theta=10_000.0,
        rms_norm_eps=1e-6,
        layer_types=interleaved_layer_types(4, global_every=3),
        sliding_window=4,
        qk_norm=True,
        post_norms=True,
        norm_offset=1.0,
        mlp_activation="gelu_tanh",
        scale_embeddings=True,
        query_pre_attn_scalar=24.0,
    )
    fields.update(overrides)
    return tiny_config(**fields)
