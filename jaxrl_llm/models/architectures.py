"""Shape-only configs of published models: what the pod-scale planner compiles without weights.

No file of these models is on this machine (and nothing may be downloaded), so they exist here as
architectures only: `nnx.eval_shape` builds them abstractly, `jaxrl_llm.scale` compiles their
programs for a TPU topology, and `init_model(architecture(name))` gives a random-weight model for
a real accelerator. Every field is the model's published Hugging Face `config.json` value.

    llama-3.2-1b    Llama 3.2 1B   16 layers, D 2048, tied embeddings, RoPE scaling 32
    llama-3.1-8b    Llama 3.1 8B   32 layers, D 4096, GQA 32:8
    qwen2.5-7b      Qwen2.5 7B     28 layers, D 3584, GQA 28:4, QKV bias
    gemma-3-27b     Gemma 3 27B    62 layers (5 local : 1 global, window 1024), D 5376, GQA 32:16
    llama-3.1-70b   Llama 3.1 70B  80 layers, D 8192, GQA 64:8
    llama-2-70b     Llama 2 70B    80 layers, D 8192, vocabulary 32000 (MaxText's v5p anchor)

Gemma 3 27B's global layers use linear RoPE scaling (factor 8), which `ModelConfig` does not
express; it changes no shape, FLOP or byte, only the rotation angles.
"""

from __future__ import annotations

from typing import Any

from jaxrl_llm.models.config import ModelConfig, RopeScaling, interleaved_layer_types

_LLAMA3_SCALING = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)


def _llama3(**fields: Any) -> dict[str, Any]:
    base = dict(
        vocab_size=128256,
        rope_theta=500_000.0,
        rope_scaling=_LLAMA3_SCALING,
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        bos_token_id=128000,
        eos_token_id=128009,
    )
    base.update(fields)
    return base


ARCHITECTURES: dict[str, dict[str, Any]] = {
    # meta-llama/Llama-3.2-1B
    "llama-3.2-1b": _llama3(
        hidden_size=2048,
        intermediate_size=8192,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        head_dim=64,
        tie_word_embeddings=True,
        rope_scaling=RopeScaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0),
    ),
    # meta-llama/Llama-3.1-8B
    "llama-3.1-8b": _llama3(
        hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32, num_kv_heads=8
    ),
    # meta-llama/Llama-3.1-70B
    "llama-3.1-70b": _llama3(
        hidden_size=8192, intermediate_size=28672, num_layers=80, num_heads=64, num_kv_heads=8
    ),
    # meta-llama/Llama-2-70b-hf
    "llama-2-70b": dict(
        vocab_size=32000,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        rope_theta=10_000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
    ),
    # Qwen/Qwen2.5-7B
    "qwen2.5-7b": dict(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        attention_bias=True,
        max_position_embeddings=131072,
        bos_token_id=151643,
        eos_token_id=151643,
    ),
    # google/gemma-3-27b-pt (text decoder)
    "gemma-3-27b": dict(
        vocab_size=262208,
        hidden_size=5376,
        intermediate_size=21504,
        num_layers=62,
        num_heads=32,
        num_kv_heads=16,
        head_dim=128,
        rope_theta=1_000_000.0,
        rope_local_theta=10_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        max_position_embeddings=131072,
        layer_types=interleaved_layer_types(62),
        sliding_window=1024,
        qk_norm=True,
        post_norms=True,
        norm_offset=1.0,
        mlp_activation="gelu_tanh",
        scale_embeddings=True,
        query_pre_attn_scalar=168.0,
        bos_token_id=2,
        eos_token_id=1,
    ),
}


def architecture(name: str, *, dtype: str = "bfloat16", **overrides: Any) -> ModelConfig:
    """The `ModelConfig` of a published architecture (see the module docstring for the names).

    Args:
      name: a key of `ARCHITECTURES`, case-insensitive.
      dtype: parameter and activation dtype ("bfloat16" on accelerators).
      **overrides: fields to change, e.g. `num_layers=2` for a quick compile.

    Raises:
      KeyError: an unknown name, listing the known ones.

    Example:
      >>> config = architecture("llama-3.1-8b")
      >>> round(config.num_params() / 1e9, 2)
      8.03
    """
    key = name.lower()
    if key not in ARCHITECTURES:
        raise KeyError(
            f"Unknown architecture {name!r}; known: {', '.join(sorted(ARCHITECTURES))}. A "
            "Hugging Face directory (config.json) or a .gguf file works too where a path is "
            "accepted."
        )
    fields = dict(ARCHITECTURES[key], dtype=dtype)
    fields.update(overrides)
    return ModelConfig(**fields)
