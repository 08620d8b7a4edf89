"""Hugging Face directories: load (config.json + safetensors + tokenizer.json) and export.

`save_hf` writes what `transformers`, vLLM or llama.cpp's converter read: config.json,
model.safetensors (float32 or bfloat16) and the tokenizer files, so a trained policy can be served
by other engines.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import numpy as np
import safetensors
import safetensors.numpy
from flax import nnx

from jaxrl_llm.models.config import ModelConfig, RopeScaling, interleaved_layer_types
from jaxrl_llm.models.lora import has_adapters, merged_model
from jaxrl_llm.models.tokenizer import Tokenizer, check_tokenizer_fits
from jaxrl_llm.models.transformer import Transformer
from jaxrl_llm.models.weights import assign_hf_tensors, hf_tensors

_SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral", "smollm2", "gemma3_text")
_GEMMA3_ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh"}


def config_from_hf(hf: dict[str, Any], *, dtype: str = "float32", source: str = "config.json"):
    """Translates a Hugging Face `config.json` dict into a `ModelConfig`."""
    model_type = hf.get("model_type")
    if model_type == "gemma3_text":
        return _gemma3_config_from_hf(hf, dtype=dtype, source=source)
    if model_type not in _SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"{source}: model_type={model_type!r} is not supported; supported: "
            f"{', '.join(_SUPPORTED_MODEL_TYPES)} (Llama-family decoders)."
        )
    if model_type == "llama" and hf.get("attention_bias"):
        raise ValueError(
            f"{source}: Llama with attention_bias=True also biases o_proj, which this model "
            "does not implement (Qwen2-style Q/K/V bias is supported via model_type='qwen2')."
        )
    if hf.get("sliding_window") and hf.get("use_sliding_window"):
        raise ValueError(f"{source}: sliding-window attention is not implemented.")
    rope = dict(hf.get("rope_parameters") or {})  # transformers >= 5 nests rope settings here
    scaling = hf.get("rope_scaling") or (rope if rope.get("rope_type") == "llama3" else None)
    rope_scaling = None
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "llama3":
            rope_scaling = RopeScaling(
                factor=float(scaling["factor"]),
                low_freq_factor=float(scaling["low_freq_factor"]),
                high_freq_factor=float(scaling["high_freq_factor"]),
                original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
            )
        elif kind not in (None, "default"):
            raise ValueError(
                f"{source}: rope scaling type {kind!r} is not implemented (llama3 is)."
            )
    eos = hf.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    return ModelConfig(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        num_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        head_dim=hf.get("head_dim"),
        rope_theta=float(hf.get("rope_theta", rope.get("rope_theta", 10000.0))),
        rope_scaling=rope_scaling,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        attention_bias=model_type == "qwen2",
        max_position_embeddings=int(hf.get("max_position_embeddings", 8192)),
        dtype=dtype,
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=eos,
    )


def _gemma3_config_from_hf(hf: dict[str, Any], *, dtype: str, source: str) -> ModelConfig:
    """A Gemma 3 text `config.json` (model_type "gemma3_text", transformers 4.50+ and 5.x)."""
    rope = hf.get("rope_parameters") or {}
    global_rope = rope.get("full_attention") or {}
    local_rope = rope.get("sliding_attention") or {}
    for kind, params in (("full_attention", global_rope), ("sliding_attention", local_rope)):
        if params.get("rope_type", "default") != "default":
            raise ValueError(
                f"{source}: rope_parameters[{kind!r}] has rope_type={params['rope_type']!r}; "
                "only unscaled RoPE (Gemma 3 270M and 1B) is implemented."
            )
    if hf.get("rope_scaling"):
        raise ValueError(f"{source}: rope_scaling is not implemented for gemma3_text.")
    for name in ("final_logit_softcapping", "attn_logit_softcapping"):
        if hf.get(name) is not None:
            raise ValueError(f"{source}: {name}={hf[name]} is not implemented (Gemma 3 has None).")
    if hf.get("use_bidirectional_attention"):
        raise ValueError(f"{source}: use_bidirectional_attention=True is not implemented.")
    activation = hf.get("hidden_activation", "gelu_pytorch_tanh")
    if activation not in _GEMMA3_ACTIVATIONS:
        raise ValueError(
            f"{source}: hidden_activation={activation!r} is not one of {list(_GEMMA3_ACTIVATIONS)}."
        )
    layers = hf["num_hidden_layers"]
    layer_types = hf.get("layer_types") or interleaved_layer_types(
        layers, hf.get("sliding_window_pattern", 6)
    )
    heads = hf["num_attention_heads"]
    eos = hf.get("eos_token_id")
    return ModelConfig(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim", 256),
        rope_theta=float(global_rope.get("rope_theta", hf.get("rope_theta", 1_000_000.0))),
        rope_local_theta=float(
            local_rope.get("rope_theta", hf.get("rope_local_base_freq", 10_000.0))
        ),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", True)),
        max_position_embeddings=int(hf.get("max_position_embeddings", 131072)),
        dtype=dtype,
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=eos[0] if isinstance(eos, list) and eos else eos,
        layer_types=tuple(layer_types),
        sliding_window=hf.get("sliding_window", 4096)
        if "sliding_attention" in layer_types
        else None,
        qk_norm=True,
        post_norms=True,
        norm_offset=1.0,
        mlp_activation=_GEMMA3_ACTIVATIONS[activation],
        scale_embeddings=True,
        query_pre_attn_scalar=float(hf.get("query_pre_attn_scalar", 256)),
    )


def _is_gemma3(config: ModelConfig) -> bool:
    """Whether `config` is a Gemma 3 text model (the fields only Gemma sets, all together)."""
    gemma = (
        config.qk_norm,
        config.post_norms,
        config.norm_offset == 1.0,
        config.mlp_activation == "gelu_tanh",
        config.scale_embeddings,
    )
    if any(gemma) and not all(gemma):
        raise ValueError(
            "config_to_hf: qk_norm, post_norms, norm_offset=1, mlp_activation='gelu_tanh' and "
            "scale_embeddings are Gemma 3's together; this mix has no Hugging Face model type."
        )
    return all(gemma)


def _shape_fields(config: ModelConfig) -> dict[str, int]:
    """The `config.json` sizes every decoder family shares."""
    return {
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
    }


def _gemma3_config_to_hf(config: ModelConfig) -> dict[str, Any]:
    """The `config.json` of a Gemma 3 text model (transformers' Gemma3ForCausalLM)."""
    layer_types = list(config.layer_types or ["full_attention"] * config.num_layers)
    query_scalar = config.query_pre_attn_scalar or config.head_dim
    if query_scalar != int(query_scalar):  # transformers' config field is an int
        raise ValueError(
            f"config_to_hf: query_pre_attn_scalar={query_scalar} is not an integer, which "
            "transformers' Gemma3TextConfig requires."
        )
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        **_shape_fields(config),
        "hidden_activation": "gelu_pytorch_tanh",
        "layer_types": layer_types,
        "sliding_window": config.sliding_window or config.max_position_embeddings,
        "query_pre_attn_scalar": int(query_scalar),
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": config.rope_theta},
            "sliding_attention": {
                "rope_type": "default",
                "rope_theta": config.rope_local_theta or config.rope_theta,
            },
        },
        # transformers 4.5x reads these two instead of rope_parameters.
        "rope_theta": config.rope_theta,
        "rope_local_base_freq": config.rope_local_theta or config.rope_theta,
        "rms_norm_eps": config.rms_norm_eps,
        "tie_word_embeddings": config.tie_word_embeddings,
        "max_position_embeddings": config.max_position_embeddings,
        "attention_bias": False,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "torch_dtype": config.dtype,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
    }


def config_to_hf(config: ModelConfig) -> dict[str, Any]:
    """The Hugging Face `config.json` dict of a `ModelConfig` (llama, or qwen2 when biased, or
    gemma3_text)."""
    if _is_gemma3(config):
        return _gemma3_config_to_hf(config)
    if config.has_local_layers or config.rope_local_theta is not None:
        raise ValueError(
            "config_to_hf: sliding-window layers and rope_local_theta are exported only as "
            "part of a Gemma 3 config."
        )
    model_type = "qwen2" if config.attention_bias else "llama"
    hf: dict[str, Any] = {
        "architectures": ["Qwen2ForCausalLM" if config.attention_bias else "LlamaForCausalLM"],
        "model_type": model_type,
        **_shape_fields(config),
        "hidden_act": "silu",
        "rope_theta": config.rope_theta,
        "rms_norm_eps": config.rms_norm_eps,
        "tie_word_embeddings": config.tie_word_embeddings,
        "max_position_embeddings": config.max_position_embeddings,
        "torch_dtype": config.dtype,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
    }
    if model_type == "llama":
        hf.update(attention_bias=False, mlp_bias=False)
    if config.rope_scaling is not None:
        s = config.rope_scaling
        hf["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        }
    return hf


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(
            f"No *.safetensors file in {path!r}; a Hugging Face model directory needs "
            "model.safetensors (or shards) next to config.json."
        )
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        try:
            # The flax framework reads bfloat16, which plain numpy cannot.
            with safetensors.safe_open(file, framework="flax") as f:
                for name in f.keys():
                    tensors[name] = np.asarray(f.get_tensor(name), dtype=np.float32)
        except Exception as e:
            raise ValueError(f"Could not read safetensors file {file!r}: {e}") from e
    return tensors


def load_hf_directory(
    path: str, *, dtype: str = "float32", param_dtype: str | None = None
) -> tuple[Transformer, Tokenizer]:
    """Loads a Llama/Qwen2/Gemma 3 model and its tokenizer from a Hugging Face directory
    (computing in `dtype`, parameters in `param_dtype`, default `dtype`; see `ModelConfig`)."""
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"No config.json in {path!r}: not a Hugging Face model directory.")
    with open(config_file) as f:
        try:
            hf_config = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{config_file}: not valid JSON ({e}).") from e
    config = config_from_hf(hf_config, dtype=dtype, source=config_file)
    config = config.replace(param_dtype=param_dtype)
    tokenizer = Tokenizer.from_hf_directory(path)
    check_tokenizer_fits(
        tokenizer,
        config.vocab_size,
        where=path,
        fix="put the tokenizer.json this model was trained with beside it, or a config.json "
        "whose vocab_size (and embedding) covers every token",
    )
    tensors = _read_safetensors(path)
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    assign_hf_tensors(model, tensors, source=path)
    return model, tokenizer


def save_hf(model: Transformer, tokenizer: Tokenizer | None, path: str, *, dtype=None) -> None:
    """Exports `model` (and `tokenizer`) as a Hugging Face directory.

    Args:
      model: the policy; LoRA adapters are folded into the weights they adapt
        (`jaxrl_llm.models.lora_export.save_peft_adapter` writes them alone instead).
      tokenizer: written as tokenizer.json + tokenizer_config.json when given; refused, before
        anything is written, when it has ids the model has no embedding row for.
      path: the output directory (created).
      dtype: "float32" or "bfloat16" for the weights; defaults to the dtype the model stores
        them in (its float32 master copy under mixed precision, `ModelConfig.param_dtype`).

    Raises:
      ValueError: `tokenizer` has more tokens than `model.config.vocab_size`.
    """
    if tokenizer is not None:
        check_tokenizer_fits(
            tokenizer,
            model.config.vocab_size,
            where=f"save_hf({path!r})",
            fix="pass the tokenizer the model was built for, or build the model with "
            "vocab_size >= the tokenizer's (e.g. tiny_config(vocab_size=tokenizer.vocab_size))",
        )
    if has_adapters(model):  # LoRA: the merged weights W + scale A B (lora_export for PEFT)
        model = merged_model(model)
    os.makedirs(path, exist_ok=True)
    config = model.config
    dtype = dtype or config.param_dtype or config.dtype
    hf_config = config_to_hf(config.replace(dtype=dtype))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2)
    tensors = hf_tensors(model)
    if dtype == "bfloat16":
        import ml_dtypes  # shipped with jax

        tensors = {k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}
    safetensors.numpy.save_file(
        tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"}
    )
    generation = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id}
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump(generation, f, indent=2)
    if tokenizer is not None:
        tokenizer.save(path)
