"""SFT data, tokenization with loss masks, packing and the masked loss (tiny random model with
SmolLM2's tokenizer)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxrl_llm.data import render_prompt
from jaxrl_llm.data.example import Example
from jaxrl_llm.data.presets import task_source
from jaxrl_llm.data.sft import (
    STEPS_RESPONSE_TEMPLATE,
    SftRecord,
    read_sft_jsonl,
    records_from_examples,
    worked_steps,
)
from jaxrl_llm.models import init_model, resolve_model_path, tiny_config
from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf
from jaxrl_llm.training import create_train_state, make_train_step
from jaxrl_llm.training.sft import make_sft_batch, sft_loss, token_accuracy, tokenize_records

RECORDS = [
    SftRecord("2 + 3 =", "The answer is 5."),
    SftRecord("What is 10 - 4?", "The answer is 6."),
    SftRecord("Add 7 and 8.", "Seven plus eight: the answer is 15."),
]


@pytest.fixture(scope="module")
def tokenizer():
    return tokenizer_from_gguf(read_gguf(resolve_model_path("smollm2-135m-instruct")))


@pytest.fixture(scope="module")
def model(tokenizer):
    config = tiny_config(vocab_size=tokenizer.vocab_size, tie_word_embeddings=False)
    return init_model(config, seed=0)


def test_tokenize_records_masks_the_response_and_ends_the_turn(tokenizer):
    sequences = tokenize_records(tokenizer, RECORDS, max_length=128, system_prompt="Be brief.")
    for record, seq in zip(RECORDS, sequences, strict=True):
        prompt = render_prompt(tokenizer, record.prompt, system_prompt="Be brief.")
        assert seq.ids[: seq.num_prompt] == tokenizer.encode(prompt)  # what the RL stage feeds
        response = seq.ids[seq.num_prompt :]
        assert tokenizer.decode(response) == record.response + "<|im_end|>"
        assert response[-1] in tokenizer.stop_token_ids()


def test_a_long_response_is_cut_and_a_long_prompt_refused(tokenizer):
    (seq,) = tokenize_records(tokenizer, [SftRecord("q", "word " * 200)], max_length=40)
    assert len(seq.ids) == 40
    with pytest.raises(ValueError, match="max_length=5"):
        tokenize_records(tokenizer, RECORDS[:1], max_length=5)


def test_packed_and_unpacked_batches_have_the_same_loss(tokenizer, model):
    sequences = tokenize_records(tokenizer, RECORDS, max_length=64)
    pad = tokenizer.pad_token_id or 0
    plain = make_sft_batch(sequences, pad_id=pad, width=64)
    packed = make_sft_batch(sequences, pad_id=pad, width=96, pack=True)
    assert packed.tokens.shape[0] < plain.tokens.shape[0]  # three sequences in fewer rows
    assert (
        plain.loss_mask.sum()
        == packed.loss_mask.sum()
        == sum(len(s.ids) - s.num_prompt for s in sequences)
    )
    loss_plain, m = sft_loss(model, jax.tree.map(jnp.asarray, plain))
    loss_packed, _ = sft_loss(model, jax.tree.map(jnp.asarray, packed))
    np.testing.assert_allclose(loss_packed, loss_plain, rtol=1e-5)
    assert float(m["tokens"]) == plain.loss_mask.sum()
    # A random model over a 49k vocabulary: the loss is about log(V).
    assert abs(float(loss_plain) - np.log(tokenizer.vocab_size)) < 1.0


def test_training_lowers_the_loss_and_raises_token_accuracy(tokenizer, model):
    sequences = tokenize_records(tokenizer, RECORDS, max_length=64)
    batch = jax.tree.map(
        jnp.asarray, make_sft_batch(sequences, pad_id=tokenizer.pad_token_id or 0, width=64)
    )
    graphdef, state = create_train_state(model, optax.adam(1e-2))
    step = make_train_step(graphdef, optax.adam(1e-2), sft_loss, donate=False)
    first, _ = sft_loss(model, batch)
    assert float(token_accuracy(model, batch)) < 0.1
    for _ in range(60):
        state, metrics = step(state, batch)
    trained = nnx.merge(graphdef, state.params)
    assert float(metrics["loss"]) < 0.2 * float(first)
    assert float(token_accuracy(trained, batch)) > 0.9


def test_worked_steps_render_chain_sums_one_operation_a_line():
    (example,) = task_source("chain_sum_steps", seed=0, size=1)  # 0 - 4 - 8 - 7 + 6 = -13
    assert example.metadata["metadata"]["expression"] == "0 - 4 - 8 - 7 + 6"
    (record,) = records_from_examples([example], STEPS_RESPONSE_TEMPLATE)
    assert (
        record.response
        == "0 - 4 = -4\n-4 - 8 = -12\n-12 - 7 = -19\n-19 + 6 = -13\nThe answer is -13."
    )
    assert worked_steps(example).count("\n") == 3  # four operations of five terms
    with pytest.raises(
        ValueError, match=r"'hand' example 0 has none: use config.task.name='chain_sum_steps'"
    ):
        records_from_examples([Example("2 * 3 =", "6", "hand", 0)], STEPS_RESPONSE_TEMPLATE)


def test_records_from_examples_and_the_jsonl_reader(tmp_path):
    records = records_from_examples([Example("2 + 3 =", "5", "hand", 0)])
    assert records == [SftRecord("2 + 3 =", "The answer is 5.")]
    with pytest.raises(ValueError, match="must contain"):
        records_from_examples([], template="no placeholder")
    path = tmp_path / "sft.jsonl"
    path.write_text(
        json.dumps({"prompt": "q", "response": "r"}) + "\n\n" + json.dumps({"prompt": "q"}) + "\n"
    )
    with pytest.raises(ValueError, match=r"sft\.jsonl:3: field 'response' is missing"):
        read_sft_jsonl(str(path))
    path.write_text(json.dumps({"prompt": "q", "response": " "}) + "\n")
    with pytest.raises(ValueError, match=r"sft\.jsonl:1: field 'response' is an empty response"):
        read_sft_jsonl(str(path))
    path.write_text(json.dumps({"prompt": "q", "response": "r"}) + "\n")
    assert read_sft_jsonl(str(path)) == [SftRecord("q", "r")]
