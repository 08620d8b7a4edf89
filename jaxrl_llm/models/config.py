"""Hyper-parameters of the Llama-family decoder (Llama 2/3, SmolLM2, Qwen2).

One frozen dataclass describes every architecture the loaders read; `validate()` runs in
`__post_init__`, so a config that cannot build a model fails where it is written, with the field
named and the fix suggested.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


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
      dtype: "float32" or "bfloat16": parameters and activations. Log-softmax always upcasts.
      bos_token_id, eos_token_id: ids from the checkpoint, for tokenizers that do not name them.
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
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    def __post_init__(self):
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
        if self.rms_norm_eps <= 0:
            raise ValueError(f"ModelConfig: rms_norm_eps={self.rms_norm_eps} must be > 0.")

    @property
    def jnp_dtype(self):
        """The jnp dtype named by `dtype`."""
        return _DTYPES[self.dtype]

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
        head = 0 if self.tie_word_embeddings else d * self.vocab_size
        return self.vocab_size * d + self.num_layers * layer + d + head


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
