"""GGUF checkpoints (llama.cpp's format) through the `gguf` package.

Reads hyper-parameters, tokenizer (byte-level BPE vocabulary and merges, or Gemma's SentencePiece
vocabulary) and chat template from the metadata, and dequantises F32, F16, BF16, Q8_0, Q4_0,
Q4_1, Q5_0, Q5_1 and the K-quants Q2_K..Q6_K to float32 with `gguf.quants.dequantize`.

llama.cpp's converter permutes the rows of the Q and K projections of `llama` models from the
"rotate half" RoPE layout (dimension i paired with i + H/2) to the interleaved layout (2i with
2i+1). `_unpermute_rotary_rows` undoes that; without it the model emits garbage. It does not
permute `gemma3` (checked by logit parity with transformers, tests/models/test_gemma3_peers.py).

Gemma 3 ("Gemma 3 Technical Report", arXiv:2503.19786): the converter stores every norm weight
as 1 + w (llama.cpp's graph multiplies by it plainly); we subtract the 1 on load, as transformers
does, because our Gemma RMSNorm multiplies by 1 + w (`ModelConfig.norm_offset`). The file does not
store which layers are global, the local layers' RoPE base or the query scale; they are filled in
as llama.cpp's loader does (`_gemma3_fields`).
"""

from __future__ import annotations

import os

import numpy as np
from flax import nnx

from jaxrl_llm.models.config import ModelConfig, interleaved_layer_types
from jaxrl_llm.models.tokenizer import Tokenizer, check_tokenizer_fits
from jaxrl_llm.models.transformer import Transformer
from jaxrl_llm.models.weights import assign_hf_tensors

SUPPORTED_TENSOR_TYPES = (
    *("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"),
    *("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"),
)
_SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "gemma3")

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
# Gemma 3's per-layer names where they differ from Llama's (four norms, QK-norm).
_GEMMA3_LAYER_NAMES = _LAYER_NAMES | {
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def _hf_name(gguf_name: str, arch: str = "llama") -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    layer_names = _GEMMA3_LAYER_NAMES if arch == "gemma3" else _LAYER_NAMES
    if gguf_name.startswith("blk."):
        _, layer, suffix = gguf_name.split(".", 2)
        if suffix in layer_names:
            return f"model.layers.{layer}.{layer_names[suffix]}"
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
    extra = _gemma3_fields(reader, source=source) if arch == "gemma3" else {}
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
        **extra,
    )


# Gemma 3's global layers: every 6th (llama.cpp's `set_swa_pattern(6)`, transformers' default).
_GEMMA3_GLOBAL_EVERY = 6
# RoPE base of the local layers when the file does not say (llama.cpp's and transformers' 10k).
_GEMMA3_LOCAL_ROPE_THETA = 10_000.0


def _gemma3_fields(reader, *, source: str) -> dict:
    """The Gemma 3 `ModelConfig` fields, from the metadata and llama.cpp's fixed choices."""
    scaling = _field(reader, "gemma3.rope.scaling.factor")
    if scaling not in (None, 1.0):
        raise ValueError(
            f"{source}: gemma3.rope.scaling.factor={scaling} (linear RoPE scaling of the global "
            "layers, Gemma 3 4B and larger) is not implemented; only the 270M and 1B are read."
        )
    layers = int(_field(reader, "gemma3.block_count"))
    hidden = int(_field(reader, "gemma3.embedding_length"))
    num_heads = int(_field(reader, "gemma3.attention.head_count"))
    head_dim = int(_field(reader, "gemma3.attention.key_length", hidden // num_heads))
    # llama.cpp scales queries by 1/sqrt(head_dim), except for the 27B (62 layers):
    # 1/sqrt(hidden / heads), as its query_pre_attn_scalar says.
    query_pre_attn_scalar = hidden // num_heads if layers == 62 else head_dim
    return dict(
        layer_types=interleaved_layer_types(layers, _GEMMA3_GLOBAL_EVERY),
        sliding_window=int(_field(reader, "gemma3.attention.sliding_window")),
        rope_local_theta=float(
            _field(reader, "gemma3.rope.freq_base_swa", _GEMMA3_LOCAL_ROPE_THETA)
        ),
        qk_norm=True,
        post_norms=True,
        norm_offset=1.0,
        mlp_activation="gelu_tanh",
        scale_embeddings=True,
        query_pre_attn_scalar=float(query_pre_attn_scalar),
    )


def tokenizer_from_gguf(reader, *, source: str = "") -> Tokenizer:
    """The tokenizer and chat template stored in a GGUF file's metadata: byte-level BPE
    ("gpt2"), or Gemma's SentencePiece vocabulary ("llama" in a `gemma3` file)."""
    kind = _field(reader, "tokenizer.ggml.model")
    arch = _field(reader, "general.architecture")
    if kind == "llama" and arch == "gemma3":
        return Tokenizer.from_gguf_sentencepiece(
            _field(reader, "tokenizer.ggml.tokens"),
            _field(reader, "tokenizer.ggml.token_type") or [],
            chat_template=_field(reader, "tokenizer.chat_template"),
            bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
            eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
            pad_token_id=_field(reader, "tokenizer.ggml.padding_token_id"),
            unk_token_id=_field(reader, "tokenizer.ggml.unknown_token_id"),
            # llama.cpp adds BOS to SentencePiece vocabularies unless the file says otherwise.
            add_bos_token=bool(_field(reader, "tokenizer.ggml.add_bos_token", True)),
        )
    if kind != "gpt2":
        raise ValueError(
            f"{source}: tokenizer.ggml.model={kind!r} (architecture {arch!r}) is not supported "
            "(byte-level BPE 'gpt2', or 'llama' SentencePiece in gemma3 files); load the "
            "Hugging Face directory's tokenizer.json instead."
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
        hf_name = _hf_name(t.name, arch)
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
        elif arch == "gemma3" and t.name.endswith("norm.weight"):
            w = w - np.float32(1.0)  # stored as 1 + w; our Gemma RMSNorm adds the 1
        tensors[hf_name] = w
    return tensors


def load_gguf(
    path: str, *, dtype: str = "float32", param_dtype: str | None = None
) -> tuple[Transformer, Tokenizer]:
    """Loads a Llama/Qwen2/Gemma 3 GGUF file into a `Transformer` and its `Tokenizer`
    (computing in `dtype`, parameters in `param_dtype`, default `dtype`; see `ModelConfig`)."""
    reader = read_gguf(path)
    config = config_from_gguf(reader, dtype=dtype, source=path).replace(param_dtype=param_dtype)
    tokenizer = tokenizer_from_gguf(reader, source=path)
    check_tokenizer_fits(
        tokenizer,
        config.vocab_size,
        where=path,
        fix="the file's token list and token_embd.weight disagree; convert the checkpoint again",
    )
    tensors = dequantized_tensors(reader, config, source=path)
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    assign_hf_tensors(model, tensors, source=path)
    return model, tokenizer
