"""Parity with an independent implementation: Hugging Face transformers' PyTorch Llama and Qwen2.

The test writes tiny random checkpoints with transformers, loads them with our loader and compares
logits (float32, 1e-4 max abs). Needs the `peers` extra (CI installs it); without it the tests are
skipped with the reason shown in the summary.
"""

import numpy as np
import pytest

from jaxrl_llm.models import from_pretrained, save_hf
from tests.models.helpers import write_tiny_tokenizer

torch = pytest.importorskip("torch", reason="peers extra (torch CPU) not installed: parity skipped")
transformers = pytest.importorskip(
    "transformers", reason="peers extra not installed: parity skipped"
)

pytestmark = pytest.mark.peers

VOCAB = 300


def _hf_config(kind: str):
    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=5000.0,
        torch_dtype="float32",
    )
    if kind == "llama":
        return transformers.LlamaConfig(tie_word_embeddings=True, **common)
    if kind == "llama3-scaled":
        return transformers.LlamaConfig(
            tie_word_embeddings=False,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=32,
            ),
            **common,
        )
    return transformers.Qwen2Config(tie_word_embeddings=False, **common)


def _write_hf_model(kind: str, path) -> "torch.nn.Module":
    torch.manual_seed(0)
    config = _hf_config(kind)
    cls = transformers.Qwen2ForCausalLM if kind == "qwen2" else transformers.LlamaForCausalLM
    model = cls(config).eval()
    with torch.no_grad():  # random (non-zero) biases and norm scales so they are really tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(str(path), safe_serialization=True)
    write_tiny_tokenizer(str(path), VOCAB)
    return model


def _torch_logits(model, tokens):
    with torch.no_grad():
        return model(torch.as_tensor(tokens)).logits.numpy()


TOKENS = np.array([[3, 17, 250, 8, 99, 42, 7, 1, 0, 299, 5, 5]] * 2, np.int32)
TOKENS[1] = TOKENS[1][::-1]


@pytest.mark.parametrize("kind", ["llama", "llama3-scaled", "qwen2"])
def test_logits_match_transformers(kind, tmp_path):
    hf_model = _write_hf_model(kind, tmp_path / kind)
    model, tokenizer = from_pretrained(str(tmp_path / kind))
    assert model.config.attention_bias == (kind == "qwen2")
    ours = np.asarray(model(TOKENS))
    theirs = _torch_logits(hf_model, TOKENS)
    assert np.abs(ours - theirs).max() < 1e-4
    assert tokenizer.eos_token == "<|im_end|>"


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_save_hf_round_trip_and_transformers_reads_export(kind, tmp_path):
    _write_hf_model(kind, tmp_path / "src")
    model, tokenizer = from_pretrained(str(tmp_path / "src"))
    save_hf(model, tokenizer, str(tmp_path / "export"))
    reloaded, tok2 = from_pretrained(str(tmp_path / "export"))
    np.testing.assert_array_equal(np.asarray(reloaded(TOKENS)), np.asarray(model(TOKENS)))
    assert tok2.encode("the cat 12") == tokenizer.encode("the cat 12")
    assert tok2.apply_chat_template(
        [{"role": "user", "content": "hi"}]
    ) == tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    # The exported directory is a valid transformers checkpoint with the same function.
    auto = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "export")).eval()
    assert np.abs(_torch_logits(auto, TOKENS) - np.asarray(model(TOKENS))).max() < 1e-4
    fast = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "export"))
    assert fast.encode("hello world", add_special_tokens=False) == tokenizer.encode("hello world")


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_peft_adapter_export_matches_peft_and_merged_export(kind, tmp_path):
    """A LoRA model exported as base + PEFT adapter, loaded by `peft` on transformers' model,
    gives our adapted logits; so does the merged export read by transformers alone."""
    peft = pytest.importorskip("peft", reason="peft not installed: adapter parity skipped")
    import jax
    from flax import nnx

    from jaxrl_llm.models.lora import LoraConfig, add_adapters, strip_adapters
    from jaxrl_llm.models.lora_export import save_peft_adapter

    _write_hf_model(kind, tmp_path / "src")
    model, tokenizer = from_pretrained(str(tmp_path / "src"))
    add_adapters(model, LoraConfig(rank=4, alpha=8.0), seed=0)
    adapters = nnx.state(model, nnx.LoRAParam)
    key = jax.random.key(3)
    nnx.update(model, jax.tree.map(lambda x: x + 0.1 * jax.random.normal(key, x.shape), adapters))
    ours = np.asarray(model(TOKENS))
    save_hf(strip_adapters(model), tokenizer, str(tmp_path / "base"))
    save_peft_adapter(model, str(tmp_path / "adapter"))
    base = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "base")).eval()
    with_adapter = peft.PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    assert np.abs(_torch_logits(with_adapter, TOKENS) - ours).max() < 1e-4
    save_hf(model, tokenizer, str(tmp_path / "merged"))
    merged = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged")).eval()
    assert np.abs(_torch_logits(merged, TOKENS) - ours).max() < 1e-4
