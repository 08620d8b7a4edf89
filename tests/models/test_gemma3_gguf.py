"""A tiny `gemma3` GGUF: hyper-parameters, tensor names, norms stored as 1 + w, K-quants, the
SentencePiece tokenizer (hand-worked merges), BOS and the plain prompt format of base models."""

import numpy as np
import pytest

from jaxrl_llm.models import load_gguf
from jaxrl_llm.models.config import GLOBAL_ATTENTION, LOCAL_ATTENTION
from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf
from jaxrl_llm.models.tokenizer import PLAIN_TEMPLATE, _merges_by_vocabulary_order
from jaxrl_llm.models.weights import hf_tensors
from jaxrl_llm.rollout.chat import chat_generation_config, completion_texts
from tests.models import gemma3_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gemma3") / "tiny-gemma3.gguf"
    expected = gemma3_gguf.write(path)
    return str(path), expected


def test_config_from_metadata_and_llama_cpp_defaults(tiny_gguf):
    path, _ = tiny_gguf
    model, _ = load_gguf(path)
    c = model.config
    assert c.layer_types == (LOCAL_ATTENTION,) * 5 + (GLOBAL_ATTENTION,)
    assert c.sliding_window == gemma3_gguf.WINDOW and c.head_dim == 32
    assert c.rope_theta == 1_000_000.0 and c.rope_local_theta == 10_000.0
    assert c.qk_norm and c.post_norms and c.norm_offset == 1.0 and c.scale_embeddings
    assert c.mlp_activation == "gelu_tanh" and c.query_pre_attn_scalar == 32.0
    assert c.tie_word_embeddings and (c.bos_token_id, c.eos_token_id) == (2, 1)
    assert c == gemma3_gguf.config().replace(rms_norm_eps=c.rms_norm_eps)


def test_tensors_norms_minus_one_no_unpermute_and_k_quants(tiny_gguf):
    """Every tensor lands under its HF name unpermuted; norms lose the converter's + 1; the
    Q4_K / Q6_K / Q5_0 / Q8_0 tensors equal `gguf.quants.dequantize`."""
    path, expected = tiny_gguf
    model, _ = load_gguf(path)
    loaded = hf_tensors(model)
    assert set(loaded) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(loaded[name], value, rtol=0, atol=1e-6, err_msg=name)
    assert np.abs(loaded["model.layers.0.mlp.down_proj.weight"]).max() > 0  # the Q4_K block
    reference = gemma3_gguf.model_from_tensors(expected)
    tokens = np.asarray([[2, 270, 271, 272, 266, 275, 268, 269, 270]], np.int32)
    np.testing.assert_allclose(
        np.asarray(model(tokens)), np.asarray(reference(tokens)), rtol=1e-5, atol=1e-5
    )


def test_merges_rank_by_vocabulary_position_then_longer_left():
    pieces = ["a", "b", "c", "ab", "bc", "abc"]
    merges = _merges_by_vocabulary_order(pieces, {p: i for i, p in enumerate(pieces)})
    assert merges == [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")]


def test_sentencepiece_tokenizer_hand_worked(tiny_gguf):
    tok = tokenizer_from_gguf(read_gguf(tiny_gguf[0]))
    tokens, _ = gemma3_gguf.vocabulary()
    ids = {t: i for i, t in enumerate(tokens)}
    space = "\u2581"
    # "ab abc" -> a b ▁ a b c: a+b first (the earliest piece), then ▁+ab, then ▁ab+c.
    assert tok.encode("ab abc") == [ids["ab"], ids[space + "abc"]]
    # No "ca" piece: c, then ab.
    assert tok.encode("cab") == [ids["c"], ids["ab"]]
    # Unknown characters fall back to their UTF-8 bytes; user-defined tokens stay whole.
    assert tok.encode("d\n\né") == [ids["<0x64>"], ids["\n\n"], ids["<0xC3>"], ids["<0xA9>"]]
    # The file spells the two-space token with spaces; the pieces spell it "▁▁".
    assert tok.encode("a  b") == [ids["a"], ids["  "], ids["b"]]
    for text in ("ab abc", "d\n\né", "a  b", "  leading", "<start_of_turn>a"):
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("<end_of_turn>") == [ids["<end_of_turn>"]]
    # BOS: Gemma wants it; encode(..., add_special_tokens=True) prepends it.
    assert tok.add_bos_token and tok.bos_token == "<bos>" and tok.eos_token == "<eos>"
    assert tok.encode("ab", add_special_tokens=True) == [2, ids["ab"]]


def test_plain_prompt_format_for_a_checkpoint_without_chat_template(tiny_gguf):
    tok = tokenizer_from_gguf(read_gguf(tiny_gguf[0]))
    assert tok.chat_template is None
    question = [{"role": "user", "content": "ab?"}]
    assert tok.apply_chat_template(question) == "<bos>Question: ab?\nAnswer:"
    few_shot = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "a?"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c?"},
    ]
    assert tok.apply_chat_template(few_shot) == (
        "<bos>Answer briefly.\n\nQuestion: a?\nAnswer: b\n\nQuestion: c?\nAnswer:"
    )
    # A conversation renders as its prompt followed by the answer (what SFT relies on).
    full = tok.apply_chat_template(
        question + [{"role": "assistant", "content": "ab"}], add_generation_prompt=False
    )
    assert full == tok.apply_chat_template(question) + " ab\n\n"
    with pytest.raises(Exception, match="unknown role tool"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}])
    # Stops: EOS, <end_of_turn>, the blank line (one token) and "\nQuestion:" (a sequence).
    tokens, _ = gemma3_gguf.vocabulary()
    ids = {t: i for i, t in enumerate(tokens)}
    assert tok.stop_token_ids() == sorted([1, ids["<end_of_turn>"], ids["\n\n"]])
    assert tok.stop_sequences() == [[ids["\n"], ids["Question"], ids[":"]]]
    config = chat_generation_config(tok, max_new_tokens=4, stop_sequences=[[5, 6]])
    assert config.stop_sequences == ((ids["\n"], ids["Question"], ids[":"]), (5, 6))
    assert config.eos_ids == tuple(tok.stop_token_ids())
    # A template set by the user replaces the plain format and its stop texts.
    tok.chat_template = "{{ messages[0]['content'] }}"
    assert tok.apply_chat_template(question) == "ab?" and tok.stop_sequences() == []
    assert PLAIN_TEMPLATE.startswith("{% if add_bos_token")


class _Rollout:
    def __init__(self, completions):
        self._completions = completions

    def completions(self):
        return self._completions


def test_completion_texts_drop_a_final_stop_text(tiny_gguf):
    tok = tokenizer_from_gguf(read_gguf(tiny_gguf[0]))
    answers = [" ab\nQuestion:", " ab\n\n", " ab<eos>", " ab"]
    rollout = _Rollout([tok.encode(a) for a in answers])
    assert completion_texts(tok, rollout) == [" ab"] * 4
