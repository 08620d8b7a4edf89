"""LoRA adapters to and from the PEFT format (Hugging Face `peft`'s `save_pretrained` layout).

A PEFT LoRA directory holds `adapter_config.json` (r, lora_alpha, target_modules, ...) and
`adapter_model.safetensors` with, per adapted linear layer, `lora_A.weight` [r, in] and
`lora_B.weight` [out, r] under the name of the layer inside the PEFT-wrapped model
(`base_model.model.model.layers.{i}.self_attn.q_proj`). Ours are A [D_in, r] and B [r, D_out]
with D_in / D_out flattened in the same order as the Hugging Face weight's columns / rows
(`jaxrl_llm.models.weights`), so each is the other's transpose. Merged weights (no adapters
left) are written by `save_hf`, which folds adapters in.
"""

from __future__ import annotations

import json
import os

import numpy as np
import safetensors.numpy
from flax import nnx

from jaxrl_llm.models.lora import (
    ADAPTER_SUFFIX,
    LoraAdapter,
    LoraConfig,
    add_adapters,
    has_adapters,
)

# Our module attribute -> the Hugging Face submodule holding that weight.
_HF_MODULE = {"attention": "self_attn", "mlp": "mlp"}
_PREFIX = "base_model.model."


def _adapters_by_hf_name(model: nnx.Module) -> dict[str, LoraAdapter]:
    """HF linear-layer name (e.g. "model.layers.0.self_attn.q_proj") -> its adapter."""
    found = {}
    for i, layer in enumerate(model.layers):
        for attr, hf_module in _HF_MODULE.items():
            module = getattr(layer, attr)
            for name, value in vars(module).items():
                if isinstance(value, LoraAdapter):
                    weight = name[: -len(ADAPTER_SUFFIX)]
                    found[f"model.layers.{i}.{hf_module}.{weight}"] = value
    return found


def save_peft_adapter(model: nnx.Module, path: str, *, base_model: str = "") -> None:
    """Writes `model`'s adapters as a PEFT LoRA directory (adapter_config.json and
    adapter_model.safetensors, float32); `base_model` is recorded as base_model_name_or_path."""
    if not has_adapters(model):
        raise ValueError("save_peft_adapter: the model has no LoRA adapters.")
    adapters = _adapters_by_hf_name(model)
    first = next(iter(adapters.values()))
    rank = first.lora_a.shape[1]
    tensors = {}
    for name, adapter in adapters.items():
        a = np.asarray(adapter.lora_a.get_value(), np.float32)
        b = np.asarray(adapter.lora_b.get_value(), np.float32)
        tensors[f"{_PREFIX}{name}.lora_A.weight"] = np.ascontiguousarray(a.T)
        tensors[f"{_PREFIX}{name}.lora_B.weight"] = np.ascontiguousarray(b.T)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": int(rank),
        "lora_alpha": float(first.scale * rank),
        "lora_dropout": float(first.dropout),
        "target_modules": sorted({n.rsplit(".", 1)[1] for n in adapters}),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "base_model_name_or_path": base_model,
    }
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    safetensors.numpy.save_file(
        tensors, os.path.join(path, "adapter_model.safetensors"), metadata={"format": "pt"}
    )


def load_peft_adapter(model: nnx.Module, path: str) -> nnx.Module:
    """Attaches the adapters of a PEFT LoRA directory to a base `model` (in place; returns it).

    Raises:
      ValueError: not a LoRA adapter of this model (another peft_type, rslora, a tensor missing
        or of the wrong shape); the message names the file and the field or tensor.
    """
    config_path = os.path.join(path, "adapter_config.json")
    with open(config_path) as f:
        config = json.load(f)
    if config.get("peft_type") != "LORA" or config.get("use_rslora"):
        raise ValueError(
            f"{config_path}: peft_type={config.get('peft_type')!r}, "
            f"use_rslora={config.get('use_rslora')!r}; only plain LoRA adapters load."
        )
    targets = config["target_modules"]
    if isinstance(targets, str):
        targets = [targets]
    lora = LoraConfig(
        rank=int(config["r"]),
        alpha=float(config["lora_alpha"]),
        dropout=float(config.get("lora_dropout", 0.0)),
        targets=tuple(targets),
    )
    add_adapters(model, lora)
    tensors = safetensors.numpy.load_file(os.path.join(path, "adapter_model.safetensors"))
    for name, adapter in _adapters_by_hf_name(model).items():
        for which, param in (("lora_A", adapter.lora_a), ("lora_B", adapter.lora_b)):
            key = f"{_PREFIX}{name}.{which}.weight"
            if key not in tensors:
                raise ValueError(f"{path}: tensor {key!r} is missing from the adapter.")
            value = tensors[key].T
            if value.shape != tuple(param.shape):
                raise ValueError(
                    f"{path}: tensor {key!r} has shape {tensors[key].shape}; this model needs "
                    f"{tuple(param.shape)[::-1]} (another base model or rank)."
                )
            param.set_value(np.asarray(value).astype(param.dtype))
    return model
