"""render_prompt with a tiny ChatML tokenizer and with the real SmolLM2 tokenizer."""

import pytest

from jaxrl_llm.data import ReasoningGymSource, render_prompt
from jaxrl_llm.models import Tokenizer, resolve_model_path
from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf
from tests.models.helpers import write_tiny_tokenizer


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_tokenizer")
    write_tiny_tokenizer(str(path))
    return Tokenizer.from_hf_directory(str(path))


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    # Reads only the GGUF's metadata (vocabulary, merges, template), not its weights.
    return tokenizer_from_gguf(read_gguf(resolve_model_path("smollm2-135m-instruct")))


def test_render_prompt_exact_chatml(tiny_tokenizer):
    text = render_prompt(
        tiny_tokenizer, "12 + 7 =", system_prompt="Be brief.", instruction_suffix=" Go."
    )
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n12 + 7 = Go.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert (
        render_prompt(tiny_tokenizer, "hi")
        == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_render_prompt_smollm2(smollm2_tokenizer):
    question = ReasoningGymSource("chain_sum", seed=42, size=1, max_terms=2, max_digits=2)[
        0
    ].question
    text = render_prompt(smollm2_tokenizer, question, instruction_suffix="\nAnswer with a number.")
    # SmolLM2's template inserts its own system message when none is given.
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nState the final answer to the following arithmetic problem: "
        "4 + 3 =\nAnswer with a number.<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = smollm2_tokenizer.encode(text)
    assert ids[0] == smollm2_tokenizer.token_to_id("<|im_start|>")
    assert ids[-4:] == smollm2_tokenizer.encode("<|im_start|>assistant\n") == [1, 520, 9531, 198]
    with_system = render_prompt(smollm2_tokenizer, "2 + 2 =", system_prompt="Answer briefly.")
    assert with_system.startswith("<|im_start|>system\nAnswer briefly.<|im_end|>\n")
