"""Models by Hugging Face id from the local hub cache (offline), and the vocabulary/tokenizer check
on load and in `save_hf`."""

import os
import socket

import numpy as np
import pytest
import safetensors.numpy

from jaxrl_llm.config import apply_overrides, config_for
from jaxrl_llm.models import Tokenizer, from_pretrained, init_model, save_hf, tiny_config
from jaxrl_llm.models.hub_cache import HubId, hub_cache_dir, parse_hub_id, resolve_hub_id
from jaxrl_llm.models.registry import resolve_model_path
from jaxrl_llm.models.weights import hf_tensors
from jaxrl_llm.runners.components import load_policy
from tests.models.helpers import write_tiny_tokenizer

REPO = "tiny-org/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the hub names snapshots by commit hash


def _tokenizer(tmp_path) -> Tokenizer:
    write_tiny_tokenizer(str(tmp_path / "tok"), 300)  # 285 tokens
    return Tokenizer.from_hf_directory(str(tmp_path / "tok"))


def _fill_cache(cache, tokenizer, *, vocab_size, commit=COMMIT, ref="main"):
    """A hub cache holding a tiny random Llama as `hf download` lays it out: the files under
    snapshots/<commit>/, and refs/<ref> naming that commit. Returns the tensors written."""
    repo_dir = cache / f"models--{REPO.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / commit
    save_hf(init_model(tiny_config(vocab_size=vocab_size), seed=3), None, str(snapshot))
    tokenizer.save(str(snapshot))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / ref).write_text(commit)
    return safetensors.numpy.load_file(str(snapshot / "model.safetensors"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty hub cache under tmp_path, found through HF_HUB_CACHE, with the network off."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    return cache


def test_parse_hub_id():
    assert parse_hub_id("Qwen/Qwen2.5-0.5B-Instruct") == HubId("Qwen/Qwen2.5-0.5B-Instruct", "main")
    assert parse_hub_id("org/model_1.5@refs/pr/1") == HubId("org/model_1.5", "refs/pr/1")
    for not_an_id in ("smollm2-135m-instruct", "/tmp/model", "a/b/c", "./x/y", "org/", "o/n@"):
        assert parse_hub_id(not_an_id) is None, not_an_id


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == str(tmp_path / "home" / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hub_cache_dir() == str(tmp_path / "elsewhere")


def test_id_from_the_cache_loads_through_the_config(cache, tmp_path):
    tokenizer = _tokenizer(tmp_path)
    written = _fill_cache(cache, tokenizer, vocab_size=tokenizer.vocab_size)
    snapshot = str(cache / "models--tiny-org--tiny-llama" / "snapshots" / COMMIT)
    assert resolve_model_path(REPO) == snapshot
    assert resolve_model_path(f"{REPO}@{COMMIT}") == snapshot

    # `--config.model.name=tiny-org/tiny-llama`, as a run loads its policy.
    config = apply_overrides(config_for("grpo"), {"model.name": REPO})
    model, loaded_tokenizer = load_policy(config)
    got = hf_tensors(model)
    assert sorted(got) == sorted(written)
    for name, value in written.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    assert loaded_tokenizer.vocab_size == 285
    assert loaded_tokenizer.encode("the cat") == tokenizer.encode("the cat")

    # A random model of the config's shape keeps the cached model's tokenizer.
    config = apply_overrides(config_for("grpo"), {"model.name": REPO, "model.init": "random"})
    model, _ = load_policy(config)
    assert model.config.vocab_size == 285 and model.config.hidden_size == 64


def test_a_branch_or_tag_resolves_through_refs(cache, tmp_path):
    tokenizer = _tokenizer(tmp_path)
    _fill_cache(cache, tokenizer, vocab_size=tokenizer.vocab_size, ref="v1")
    want = str(cache / "models--tiny-org--tiny-llama" / "snapshots" / COMMIT)
    assert resolve_hub_id(f"{REPO}@v1") == want
    with pytest.raises(FileNotFoundError, match=r"revision 'main'\) is not in the local cache"):
        resolve_hub_id(REPO)  # only the tag was downloaded: no refs/main


def test_missing_id_names_the_cache_and_the_fix(cache, tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
    message = str(error.value)
    assert "\n" not in message
    assert "'Qwen/Qwen2.5-0.5B-Instruct'" in message
    assert f"is not in the local cache {cache} " in message
    assert "`hf download Qwen/Qwen2.5-0.5B-Instruct`" in message
    assert "models--Qwen--Qwen2.5-0.5B-Instruct" in message and "HF_HUB_CACHE" in message

    # A cached id at a revision the cache does not hold is missing too, named with it.
    tokenizer = _tokenizer(tmp_path)
    _fill_cache(cache, tokenizer, vocab_size=tokenizer.vocab_size)
    with pytest.raises(FileNotFoundError, match=r"revision 'v2'\) is not in the local cache"):
        resolve_model_path(f"{REPO}@v2")


def test_a_name_that_is_no_id_keeps_the_plain_error(cache):
    with pytest.raises(FileNotFoundError, match="neither a known model name.*Hugging Face id"):
        resolve_model_path("not-a-model")


def test_tokenizer_larger_than_the_embedding_is_refused_on_load(cache, tmp_path):
    tokenizer = _tokenizer(tmp_path)
    _fill_cache(cache, tokenizer, vocab_size=256)
    with pytest.raises(ValueError) as error:
        from_pretrained(REPO)
    message = str(error.value)
    assert "\n" not in message
    assert "the tokenizer has 285 tokens but the model's embedding has only 256 rows" in message
    assert "ids 256-284 cannot be embedded" in message and "tokenizer.json" in message


def test_embedding_padded_above_the_tokenizer_loads(cache, tmp_path):
    # Qwen2.5 pads 151,665 tokens to 151,936 rows; here 285 tokens in 320 rows.
    tokenizer = _tokenizer(tmp_path)
    _fill_cache(cache, tokenizer, vocab_size=320)
    model, loaded_tokenizer = from_pretrained(REPO)
    assert (model.config.vocab_size, loaded_tokenizer.vocab_size) == (320, 285)


def test_save_hf_refuses_a_tokenizer_larger_than_the_embedding(tmp_path):
    tokenizer = _tokenizer(tmp_path)
    model = init_model(tiny_config(vocab_size=256), seed=0)
    with pytest.raises(ValueError) as error:
        save_hf(model, tokenizer, str(tmp_path / "export"))
    message = str(error.value)
    assert "\n" not in message
    assert "save_hf(" in message and "285 tokens" in message and "only 256 rows" in message
    assert "tiny_config(vocab_size=tokenizer.vocab_size)" in message
    assert not os.path.exists(tmp_path / "export")  # refused before anything was written
