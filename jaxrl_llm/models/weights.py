"""The one mapping between our parameter layout and Hugging Face Llama/Qwen2/Gemma 3 tensor names.

Hugging Face stores each projection as a torch Linear weight [out, in]; we store einsum-friendly
kernels ([D, N, H] for Q, [N, H, D] for O, [D, F] for gate/up, ...). Both loaders (HF safetensors,
GGUF) and the exporter go through `named_parameters`, so the layout is written down once.

Norm scales are stored as Hugging Face stores them: Gemma's as offsets from 1 (its RMSNorm
multiplies by 1 + weight, and so does ours with `norm_offset=1`), so export copies them unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.models.transformer import Transformer


class NamedParameter(NamedTuple):
    """A parameter with its converters to and from the Hugging Face [out, in] layout."""

    variable: nnx.Param
    from_hf: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


def _identity(x):
    return x


def _linear_in_out(x):
    return x.T  # HF [out, in] <-> ours [in, out]


def named_parameters(model: Transformer) -> dict[str, NamedParameter]:
    """Every parameter of `model` under its Hugging Face name, with layout converters."""
    c = model.config
    n, k, h, d = c.num_heads, c.num_kv_heads, c.head_dim, c.hidden_size

    def proj_in(heads):  # HF [heads*H, D] <-> ours [D, heads, H]
        return (
            lambda w: w.T.reshape(d, heads, h),
            lambda w: w.reshape(d, heads * h).T,
        )

    def bias(heads):  # HF [heads*H] <-> ours [heads, H]
        return (lambda b: b.reshape(heads, h), lambda b: b.reshape(heads * h))

    out_proj = (lambda w: w.T.reshape(n, h, d), lambda w: w.reshape(n * h, d).T)

    params: dict[str, NamedParameter] = {
        "model.embed_tokens.weight": NamedParameter(model.embed, _identity, _identity),
        "model.norm.weight": NamedParameter(model.final_norm.scale, _identity, _identity),
    }
    if model.lm_head is not None:
        params["lm_head.weight"] = NamedParameter(model.lm_head, _linear_in_out, _linear_in_out)
    for i, layer in enumerate(model.layers):
        prefix = f"model.layers.{i}."
        attn, mlp = layer.attention, layer.mlp
        entries = {
            name: (norm.scale, _identity, _identity) for name, norm in _layer_norms(layer).items()
        }
        entries |= {
            "self_attn.q_proj.weight": (attn.q_proj, *proj_in(n)),
            "self_attn.k_proj.weight": (attn.k_proj, *proj_in(k)),
            "self_attn.v_proj.weight": (attn.v_proj, *proj_in(k)),
            "self_attn.o_proj.weight": (attn.o_proj, *out_proj),
            "mlp.gate_proj.weight": (mlp.gate_proj, _linear_in_out, _linear_in_out),
            "mlp.up_proj.weight": (mlp.up_proj, _linear_in_out, _linear_in_out),
            "mlp.down_proj.weight": (mlp.down_proj, _linear_in_out, _linear_in_out),
        }
        if attn.q_norm is not None:
            entries["self_attn.q_norm.weight"] = (attn.q_norm.scale, _identity, _identity)
            entries["self_attn.k_norm.weight"] = (attn.k_norm.scale, _identity, _identity)
        if attn.q_bias is not None:
            entries["self_attn.q_proj.bias"] = (attn.q_bias, *bias(n))
            entries["self_attn.k_proj.bias"] = (attn.k_bias, *bias(k))
            entries["self_attn.v_proj.bias"] = (attn.v_bias, *bias(k))
        for name, (var, from_hf, to_hf) in entries.items():
            params[prefix + name] = NamedParameter(var, from_hf, to_hf)
    return params


def _layer_norms(layer) -> dict[str, nnx.Module]:
    """A layer's RMSNorms under their Hugging Face names (Llama's two, or Gemma's four)."""
    if layer.attention_output_norm is None:
        return {
            "input_layernorm.weight": layer.input_norm,
            "post_attention_layernorm.weight": layer.post_attention_norm,
        }
    # Gemma 3 names the attention output's norm post_attention_layernorm; ours before the MLP
    # (`post_attention_norm`, Llama's name) is its pre_feedforward_layernorm.
    return {
        "input_layernorm.weight": layer.input_norm,
        "post_attention_layernorm.weight": layer.attention_output_norm,
        "pre_feedforward_layernorm.weight": layer.post_attention_norm,
        "post_feedforward_layernorm.weight": layer.mlp_output_norm,
    }


def assign_hf_tensors(
    model: Transformer, tensors: Mapping[str, np.ndarray], *, source: str
) -> Transformer:
    """Fills every parameter of `model` from Hugging Face-named tensors (modified in place).

    Args:
      model: a model (abstract from `nnx.eval_shape`, or concrete) of the right config.
      tensors: HF name -> array in HF layout. Extra names (rotary caches, ...) are ignored.
      source: the file or directory, for error messages.

    Raises:
      ValueError: a tensor is missing or has the wrong shape; the message names it.
    """
    dtype = model.config.jnp_param_dtype
    for name, entry in named_parameters(model).items():
        if name not in tensors:
            raise ValueError(f"{source}: tensor {name!r} is missing from the checkpoint.")
        value = entry.from_hf(np.asarray(tensors[name]))
        expected = tuple(entry.variable.get_value().shape)
        if tuple(value.shape) != expected:
            raise ValueError(
                f"{source}: tensor {name!r} has shape {tuple(tensors[name].shape)}, which does "
                f"not fit the config (expected {expected} in our layout); the config and the "
                "weights disagree."
            )
        entry.variable.set_value(jnp.asarray(value, dtype=dtype))
    return model


def hf_tensors(model: Transformer, dtype=np.float32) -> dict[str, np.ndarray]:
    """Every parameter of `model` as HF-named numpy arrays in HF layout."""
    return {
        name: np.ascontiguousarray(entry.to_hf(np.asarray(entry.variable.get_value(), dtype=dtype)))
        for name, entry in named_parameters(model).items()
    }
