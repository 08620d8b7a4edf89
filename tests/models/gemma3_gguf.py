"""A tiny `gemma3` GGUF written as llama.cpp's converter writes one, for the loader tests.

Norm weights are stored as 1 + w, Q/K rows are not permuted, the vocabulary is SentencePiece
("llama" tokenizer model, no merges, byte-fallback tokens, runs of spaces spelled with spaces).
"""

import gguf
import jax.numpy as jnp
import numpy as np

from jaxrl_llm.models import init_model
from jaxrl_llm.models.config import interleaved_layer_types, tiny_gemma3_config
from jaxrl_llm.models.weights import hf_tensors

Q = gguf.GGMLQuantizationType
LAYERS = 6  # llama.cpp fixes Gemma 3's pattern: layers 0-4 local, 5 global
WINDOW = 4

# The SentencePiece pieces after the specials and the 256 byte tokens, best merge first.
PIECES = ["\u2581", "a", "b", "c", "ab", "\u2581a", "bc", "\u2581ab", "abc", "\u2581abc"]
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
USER_DEFINED = ["\n", "\n\n", "  ", "Question", ":"]

# GGUF name -> HF name suffix, per layer (llama.cpp's gemma3 tensor names).
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def vocabulary() -> tuple[list[str], list[int]]:
    """Tokens and GGUF token types (1 normal, 3 control, 4 user defined, 6 byte)."""
    tokens = SPECIALS + USER_DEFINED + [f"<0x{i:02X}>" for i in range(256)] + PIECES
    types = [3] * len(SPECIALS) + [4] * len(USER_DEFINED) + [6] * 256 + [1] * len(PIECES)
    return tokens, types


def config():
    """The config the file describes (query scale = head_dim, as llama.cpp reads it)."""
    vocab = len(vocabulary()[0])
    return tiny_gemma3_config(
        vocab_size=vocab,
        num_layers=LAYERS,
        layer_types=interleaved_layer_types(LAYERS),
        sliding_window=WINDOW,
        intermediate_size=256,  # one 256-wide K-quant block per ffn_down row
        query_pre_attn_scalar=32.0,
        bos_token_id=2,
        eos_token_id=1,
    )


def _random_k_quant_rows(rng, rows: int, qtype) -> np.ndarray:
    """Random bytes of `rows` 256-wide K-quant blocks with small finite fp16 scales."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    assert block_size == 256
    raw = rng.integers(0, 256, size=(rows, type_size), dtype=np.uint8)
    scales = (0.01 * rng.random((rows, 2)) + 1e-3).astype(np.float16).view(np.uint8)
    if qtype == Q.Q6_K:  # ... ql[128] qh[64] scales[16] d (fp16)
        raw[:, -2:] = scales[:, :2]
    else:  # Q4_K: d, dmin (fp16) first
        raw[:, :4] = scales
    return raw


def write(path) -> dict[str, np.ndarray]:
    """Writes the file; returns the HF-named float32 tensors the loader must produce."""
    rng = np.random.default_rng(0)
    c = config()
    model = init_model(c, seed=0)
    expected = {name: np.asarray(v, np.float32) for name, v in hf_tensors(model).items()}
    for name in expected:
        if name.endswith("norm.weight"):
            expected[name] = (0.3 * rng.standard_normal(expected[name].shape)).astype(np.float32)
    tokens, types = vocabulary()
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_block_count(LAYERS)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_heads)
    w.add_head_count_kv(c.num_kv_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(c.rope_theta)
    w.add_sliding_window(WINDOW)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([-1000.0] * len(tokens))
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)
    for name, value in expected.items():
        gname = _gguf_name(name)
        if value.ndim == 1:  # norms: F32, stored as 1 + w
            w.add_tensor(gname, (value + np.float32(1.0)).astype(np.float32))
            continue
        qtype = {"ffn_down": Q.Q4_K if ".0." in gname else Q.Q6_K, "attn_q": Q.Q8_0}.get(
            gname.split(".")[-2], Q.Q5_0
        )
        if gname == "token_embd.weight":
            qtype = Q.Q8_0
        if qtype in (Q.Q4_K, Q.Q6_K):
            data = _random_k_quant_rows(rng, value.shape[0], qtype)
        else:
            data = gguf.quants.quantize(value, qtype)
        w.add_tensor(gname, data, raw_dtype=qtype)
        expected[name] = gguf.quants.dequantize(data, qtype).reshape(value.shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


def _gguf_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    _, _, layer, rest = hf_name.split(".", 3)
    suffix = rest.rsplit(".", 1)[0]
    short = next(g for g, h in LAYER_NAMES.items() if h == suffix)
    return f"blk.{layer}.{short}.weight"


def model_from_tensors(tensors):
    """A model of `config()` holding `tensors` (HF names) exactly."""
    from flax import nnx

    from jaxrl_llm.models.transformer import Transformer
    from jaxrl_llm.models.weights import assign_hf_tensors

    model = nnx.eval_shape(lambda: Transformer(config(), rngs=nnx.Rngs(0)))
    return assign_hf_tensors(model, {k: jnp.asarray(v) for k, v in tensors.items()}, source="t")
