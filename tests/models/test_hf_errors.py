"""Clear errors for broken Hugging Face directories (no torch needed)."""

import json

import numpy as np
import pytest

from jaxrl_llm.models import Tokenizer, from_pretrained, init_model, save_hf, tiny_config
from tests.models.helpers import write_tiny_tokenizer


def _export_tiny(path):
    write_tiny_tokenizer(str(path / "tok"), 300)
    tokenizer = Tokenizer.from_hf_directory(str(path / "tok"))
    model = init_model(tiny_config(vocab_size=tokenizer.vocab_size), seed=0)
    save_hf(model, tokenizer, str(path / "model"))
    return model


def test_save_hf_then_load_is_identical_without_torch(tmp_path):
    model = _export_tiny(tmp_path)
    reloaded, _ = from_pretrained(str(tmp_path / "model"))
    tokens = np.array([[1, 2, 3, 4]], np.int32)
    np.testing.assert_array_equal(np.asarray(reloaded(tokens)), np.asarray(model(tokens)))


def test_bfloat16_export_loads(tmp_path):
    model = _export_tiny(tmp_path)
    save_hf(model, None, str(tmp_path / "bf16"), dtype="bfloat16")
    (tmp_path / "bf16" / "tokenizer.json").write_text(
        (tmp_path / "model" / "tokenizer.json").read_text()
    )
    reloaded, _ = from_pretrained(str(tmp_path / "bf16"))
    tokens = np.array([[1, 2, 3, 4]], np.int32)
    assert np.abs(np.asarray(reloaded(tokens)) - np.asarray(model(tokens))).max() < 0.05


def test_unparsable_tokenizer_file(tmp_path):
    _export_tiny(tmp_path)
    (tmp_path / "model" / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="Could not parse tokenizer file"):
        from_pretrained(str(tmp_path / "model"))


def test_missing_weights_and_bad_config(tmp_path):
    _export_tiny(tmp_path)
    model_dir = tmp_path / "model"
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(
        json.dumps({**config, "num_attention_heads": 5, "num_key_value_heads": 5, "head_dim": None})
    )
    with pytest.raises(ValueError, match="hidden_size=64 is not divisible by num_heads=5"):
        from_pretrained(str(model_dir))
    (model_dir / "config.json").write_text(json.dumps({**config, "model_type": "gpt_neox"}))
    with pytest.raises(ValueError, match="model_type='gpt_neox' is not supported"):
        from_pretrained(str(model_dir))
    (model_dir / "config.json").write_text(json.dumps({**config, "intermediate_size": 100}))
    with pytest.raises(ValueError, match="mlp.gate_proj.weight.*does not fit the config"):
        from_pretrained(str(model_dir))
    (model_dir / "config.json").write_text(json.dumps(config))
    (model_dir / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="No \\*.safetensors file"):
        from_pretrained(str(model_dir))
