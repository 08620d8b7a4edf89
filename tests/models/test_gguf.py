"""GGUF loading: name mapping, dequantisation of each supported type, Q/K un-permutation, errors."""

import json
import os

import gguf
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_llm.models import from_pretrained, load_gguf
from jaxrl_llm.models.weights import hf_tensors
from tests.models.helpers import CHATML, write_tiny_tokenizer

L, D, F, N, K, V = 2, 64, 96, 4, 2, 300
H = D // N
Q = gguf.GGMLQuantizationType


def llama_cpp_permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute (HF rotate-half -> interleaved rows)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _random_hf_tensors(seed=0, vocab=V):
    rng = np.random.default_rng(seed)
    t = {
        "model.embed_tokens.weight": rng.normal(size=(vocab, D)),
        "model.norm.weight": 1 + 0.1 * rng.normal(size=D),
    }
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + 0.1 * rng.normal(size=D)
        t[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.normal(size=D)
        t[p + "self_attn.q_proj.weight"] = rng.normal(size=(N * H, D)) * 0.1
        t[p + "self_attn.k_proj.weight"] = rng.normal(size=(K * H, D)) * 0.1
        t[p + "self_attn.v_proj.weight"] = rng.normal(size=(K * H, D)) * 0.1
        t[p + "self_attn.o_proj.weight"] = rng.normal(size=(D, N * H)) * 0.1
        t[p + "mlp.gate_proj.weight"] = rng.normal(size=(F, D)) * 0.1
        t[p + "mlp.up_proj.weight"] = rng.normal(size=(F, D)) * 0.1
        t[p + "mlp.down_proj.weight"] = rng.normal(size=(D, F)) * 0.1
    return {k: v.astype(np.float32) for k, v in t.items()}


GGUF_NAME = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def write_tiny_gguf(path, tmp_path, *, weight_type=Q.Q8_0, override_type=None, embedding_rows=None):
    """Writes a tiny llama GGUF as llama.cpp's converter would; returns the dequantised HF tensors.
    `embedding_rows`: the vocab_size and embedding rows (default: the token list's length)."""
    write_tiny_tokenizer(str(tmp_path / "tok"), V)
    tok_json = json.load(open(tmp_path / "tok" / "tokenizer.json"))
    vocab = tok_json["model"]["vocab"]
    for added in tok_json["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_json["model"]["merges"]]
    types = [3 if t.startswith("<|") else 1 for t in tokens]

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(L)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(N)
    w.add_head_count_kv(K)
    w.add_rope_freq_base(5000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_context_length(128)
    rows = embedding_rows or len(tokens)
    w.add_vocab_size(rows)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(vocab["<|im_start|>"])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_chat_template(CHATML)
    expected = {}
    for name, value in _random_hf_tensors(vocab=rows).items():
        if name.startswith("model.layers."):
            _, _, i, suffix = name.split(".", 3)
            gname = f"blk.{i}.{GGUF_NAME[suffix]}"
        else:
            gname = {
                "model.embed_tokens.weight": "token_embd.weight",
                "model.norm.weight": "output_norm.weight",
            }[name]
        stored = value
        if gname.endswith("attn_q.weight"):
            stored = llama_cpp_permute(value, N)
        elif gname.endswith("attn_k.weight"):
            stored = llama_cpp_permute(value, K)
        qtype = Q.F32 if value.ndim == 1 else weight_type
        if override_type is not None and gname == "blk.1.ffn_up.weight":
            qtype = override_type
        if qtype == Q.F32:
            w.add_tensor(gname, stored)
            expected[name] = value
            continue
        data = gguf.quants.quantize(stored, qtype)
        w.add_tensor(gname, data, raw_dtype=qtype)
        deq = gguf.quants.dequantize(data, qtype).reshape(stored.shape)
        if gname.endswith("attn_q.weight") or gname.endswith("attn_k.weight"):
            n = N if gname.endswith("attn_q.weight") else K
            # Undo the permutation on the dequantised rows (quantisation blocks run along D).
            deq = deq.reshape(n, H // 2, 2, D).swapaxes(1, 2).reshape(n * H, D)
        expected[name] = deq
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1])
def test_every_supported_type_dequantises_and_unpermutes(qtype, tmp_path):
    path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(path, tmp_path, weight_type=qtype)
    model, tokenizer = load_gguf(str(path))
    assert model.config.tie_word_embeddings and model.config.num_kv_heads == K
    loaded = hf_tensors(model)
    assert set(loaded) == set(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(loaded[name], value.astype(np.float32), err_msg=name)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.decode(tokenizer.encode("the cat sat")) == "the cat sat"


def test_quantised_file_computes_like_unquantised_weights(tmp_path):
    """Q8_0 weights stay within quantisation noise of the float32 model's logits."""
    from flax import nnx

    from jaxrl_llm.models.transformer import Transformer
    from jaxrl_llm.models.weights import assign_hf_tensors

    write_tiny_gguf(tmp_path / "q8.gguf", tmp_path, weight_type=Q.Q8_0)
    model, _ = load_gguf(str(tmp_path / "q8.gguf"))
    exact = nnx.eval_shape(lambda: Transformer(model.config, rngs=nnx.Rngs(0)))
    assign_hf_tensors(exact, _random_hf_tensors(vocab=model.config.vocab_size), source="test")
    tokens = jnp.asarray([[1, 5, 9, 200, 17]])
    ours, reference = np.asarray(model(tokens)), np.asarray(exact(tokens))
    # Q8_0 keeps ~2.5 significant digits per weight: logits agree to about 1% of their scale.
    relative = np.abs(ours - reference).max() / np.abs(reference).max()
    assert relative < 0.03, relative
    assert (ours.argmax(-1) == reference.argmax(-1)).mean() >= 0.8


def test_unsupported_tensor_type_is_named(tmp_path):
    path = tmp_path / "bad.gguf"
    # An i-quant (not read): raw IQ4_XS bytes, 256 values in 136 bytes per row.
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_embedding_length(256)
    w.add_feed_forward_length(256)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b"])
    w.add_token_types([1, 1])
    w.add_token_merges([])
    w.add_tensor("token_embd.weight", np.zeros((2, 136), np.uint8), raw_dtype=Q.IQ4_XS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match=r"token_embd.weight.*IQ4_XS.*not supported"):
        load_gguf(str(path))


def test_token_list_longer_than_the_embedding_is_refused(tmp_path):
    write_tiny_gguf(tmp_path / "short.gguf", tmp_path, weight_type=Q.F32, embedding_rows=256)
    with pytest.raises(
        ValueError,
        match=r"short.gguf: the tokenizer has 285 tokens but the "
        r"model's embedding has only 256 rows",
    ):
        load_gguf(str(tmp_path / "short.gguf"))


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        load_gguf(str(tmp_path / "nope.gguf"))
    with pytest.raises(FileNotFoundError, match="neither a known model name"):
        from_pretrained(str(tmp_path / "nope"))
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(64))
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        load_gguf(str(bad))
