"""GGUF checkpoints (llama.cpp's format) through the `gguf` package.

Reads hyper-parameters, tokenizer (byte-level BPE vocabulary and merges) and chat template from the
metadata, and dequantises F32, F16, BF16, Q8_0, Q4_0 and Q4_1 tensors to float32 with
`gguf.quants.dequantize`.

llama.cpp's converter permutes the rows of the Q and K projections of `llama` models from the
"rotate half" RoPE layout (dimension i paired with i + H/2) to the interleaved layout (2i with
2i+1). `_unpermute_rotary_rows` undoes that; without it the model emits garbage.
"""

from __future__ import annotations

import os

import numpy as np
from flax import nnx

from jaxrl_llm.models.config import ModelConfig
from jaxrl_llm.models.tokenizer import Tokenizer
from jaxrl_llm.models.transformer import Transformer
from jaxrl_llm.models.weights import assign_hf_tensors

SUPPORTED_TENSOR_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")
_SUPPORTED_ARCHITECTURES = ("llama", "qwen2")

# GGUF tensor name suffix -> Hugging Face name suffix, per layer.
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def _hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    if gguf_name.startswith("blk."):
        _, layer, suffix = gguf_name.split(".", 2)
        if suffix in _LAYER_NAMES:
            return f"model.layers.{layer}.{_LAYER_NAMES[suffix]}"
    return None


def _unpermute_rotary_rows(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's `permute`: interleaved RoPE rows back to rotate-half rows.

    The converter maps rows [N, 2, H/2] -> [N, H/2, 2]; we swap them back. Works for weights
    [N*H, D] and biases [N*H].
    """
    rows = w.shape[0]
    head_dim = rows // num_heads
    return w.reshape(num_heads, head_dim // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader, key, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def read_gguf(path: str):
    """Opens a GGUF file with a clear error for a missing or corrupt file."""
    import gguf

    if not os.path.isfile(path):
        raise FileNotFoundError(f"GGUF file not found: {path!r}.")
    try:
        return gguf.GGUFReader(path)
    except Exception as e:
        raise ValueError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e}).") from e


def config_from_gguf(reader, *, dtype: str = "float32", source: str = "") -> ModelConfig:
    """The `ModelConfig` described by a GGUF file's metadata."""
    arch = _field(reader, "general.architecture")
    if arch not in _SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"{source}: GGUF architecture {arch!r} is not supported "
            f"(supported: {', '.join(_SUPPORTED_ARCHITECTURES)})."
        )
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ValueError(
            f"{source}: RoPE frequency factors (rope_freqs.weight, Llama 3.1 scaling) are not read "
            "from GGUF; load the Hugging Face directory of this model instead."
        )
    tokens = _field(reader, "tokenizer.ggml.tokens") or []
    num_heads = int(_field(reader, f"{arch}.attention.head_count"))
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    head_dim = _field(reader, f"{arch}.attention.key_length")
    return ModelConfig(
        vocab_size=int(_field(reader, f"{arch}.vocab_size", len(tokens))),
        hidden_size=hidden,
        intermediate_size=int(_field(reader, f"{arch}.feed_forward_length")),
        num_layers=int(_field(reader, f"{arch}.block_count")),
        num_heads=num_heads,
        num_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", num_heads)),
        head_dim=None if head_dim is None else int(head_dim),
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        attention_bias=any(t.name.endswith("attn_q.bias") for t in reader.tensors),
        max_position_embeddings=int(_field(reader, f"{arch}.context_length", 8192)),
        dtype=dtype,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
    )


def tokenizer_from_gguf(reader, *, source: str = "") -> Tokenizer:
    """The byte-level BPE tokenizer and chat template stored in a GGUF file's metadata."""
    kind = _field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            f"{source}: tokenizer.ggml.model={kind!r} is not supported (only byte-level BPE, "
            "'gpt2'); load the Hugging Face directory's tokenizer.json instead."
        )
    return Tokenizer.from_gguf_vocabulary(
        _field(reader, "tokenizer.ggml.tokens"),
        _field(reader, "tokenizer.ggml.merges") or [],
        _field(reader, "tokenizer.ggml.token_type") or [],
        pre=_field(reader, "tokenizer.ggml.pre", "gpt2"),
        chat_template=_field(reader, "tokenizer.chat_template"),
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
        pad_token_id=_field(reader, "tokenizer.ggml.padding_token_id"),
    )


def dequantized_tensors(reader, config: ModelConfig, *, source: str = "") -> dict[str, np.ndarray]:
    """All model tensors as float32 numpy arrays, in Hugging Face names and layout."""
    import gguf

    arch = _field(reader, "general.architecture")
    tensors = {}
    for t in reader.tensors:
        hf_name = _hf_name(t.name)
        if hf_name is None:
            continue
        type_name = t.tensor_type.name
        if type_name not in SUPPORTED_TENSOR_TYPES:
            raise ValueError(
                f"{source}: tensor {t.name!r} has GGUF type {type_name}, which is not supported "
                f"(supported: {', '.join(SUPPORTED_TENSOR_TYPES)}). Re-quantise the file, e.g. "
                "with llama.cpp's llama-quantize to Q8_0, or load an unquantised checkpoint."
            )
        # GGUF shapes list the fastest axis first; numpy's is the reverse: HF [out, in].
        shape = tuple(int(s) for s in reversed(t.shape))
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_q.bias")):
            w = _unpermute_rotary_rows(w, config.num_heads)
        elif arch == "llama" and t.name.endswith(("attn_k.weight", "attn_k.bias")):
            w = _unpermute_rotary_rows(w, config.num_kv_heads)
        tensors[hf_name] = w
    return tensors


def load_gguf(path: str, *, dtype: str = "float32") -> tuple[Transformer, Tokenizer]:
    """Loads a Llama/Qwen2 GGUF file into a `Transformer` and its `Tokenizer`."""
    reader = read_gguf(path)
    config = config_from_gguf(reader, dtype=dtype, source=path)
    tokenizer = tokenizer_from_gguf(reader, source=path)
    tensors = dequantized_tensors(reader, config, source=path)
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    assign_hf_tensors(model, tensors, source=path)
    return model, tokenizer
