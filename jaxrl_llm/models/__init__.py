"""Llama-family and Gemma 3 decoders in Flax NNX, their loaders (GGUF, HF) and tokenizer, and
mixed precision (`precision`: float32 master weights, programs computing in bfloat16)."""

from jaxrl_llm.models.config import (
    ModelConfig,
    RopeScaling,
    interleaved_layer_types,
    tiny_config,
    tiny_gemma3_config,
)
from jaxrl_llm.models.gguf_loader import load_gguf
from jaxrl_llm.models.heads import ScalarHeadModel, load_scalar_model, save_scalar_model
from jaxrl_llm.models.hf import load_hf_directory, save_hf
from jaxrl_llm.models.layers import LayerKV
from jaxrl_llm.models.precision import compute_params, frozen_copy, merge_for_compute
from jaxrl_llm.models.registry import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    PackagedModel,
    from_pretrained,
    resolve_model_path,
)
from jaxrl_llm.models.tokenizer import PLAIN_TEMPLATE, Tokenizer
from jaxrl_llm.models.transformer import (
    KV_CACHE_LOGICAL_AXES,
    REMAT_POLICIES,
    KVCache,
    Transformer,
    init_model,
)

__all__ = [
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "KV_CACHE_LOGICAL_AXES",
    "KVCache",
    "LayerKV",
    "ModelConfig",
    "PLAIN_TEMPLATE",
    "PackagedModel",
    "REMAT_POLICIES",
    "RopeScaling",
    "ScalarHeadModel",
    "Tokenizer",
    "Transformer",
    "compute_params",
    "from_pretrained",
    "frozen_copy",
    "init_model",
    "interleaved_layer_types",
    "load_gguf",
    "load_hf_directory",
    "load_scalar_model",
    "merge_for_compute",
    "resolve_model_path",
    "save_hf",
    "save_scalar_model",
    "tiny_config",
    "tiny_gemma3_config",
]
