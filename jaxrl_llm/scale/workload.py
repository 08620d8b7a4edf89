"""An RL workload as the planner sees it: the run config's shapes, roles and options.

    workload = workload_of(load_config("experiments/configs/grpo_llama8b_pod.py"))

The model comes from `config.model.name` without loading weights: a published architecture
(`jaxrl_llm.models.architectures`, e.g. "llama-3.1-8b"), a GGUF file's header, a Hugging Face
directory's config.json, or (with `config.model.init="random"`) `config.model.random` with the
tokenizer's vocabulary. Prompt length is `config.rollout.min_prompt_bucket` (every prompt padded
to it), response length `config.rollout.max_new_tokens`.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import ml_collections

from jaxrl_llm.models.architectures import ARCHITECTURES, architecture
from jaxrl_llm.models.config import ModelConfig


class Workload(NamedTuple):
    """What one RL step computes, without weights.

    Attributes:
      config: the run config (its algorithm, loss, optimizer and train sections are read by
        the same builders the runners use).
      model: the policy's architecture.
      roles: the algorithm's roles (`Algorithm.roles`), plus "reward_model" when
        `config.rewards.model` is set.
      num_prompts, group_size: prompts per step and completions per prompt.
      prompt_len, response_len: tokens of each (the prompt bucket, max_new_tokens).
      num_minibatches: optimizer updates per step.
      asynchronous: `config.async_rl.enabled`.
    """

    config: ml_collections.ConfigDict
    model: ModelConfig
    roles: tuple[str, ...]
    num_prompts: int
    group_size: int
    prompt_len: int
    response_len: int
    num_minibatches: int
    asynchronous: bool

    @property
    def sequences(self) -> int:
        """Completions per step (prompts x group)."""
        return self.num_prompts * self.group_size

    @property
    def length(self) -> int:
        """Tokens of a rollout row (prompt bucket + response)."""
        return self.prompt_len + self.response_len

    @property
    def minibatch_rows(self) -> int:
        """Rows of one optimizer update."""
        return self.sequences // self.num_minibatches

    @property
    def lora(self) -> bool:
        """Whether the policy trains LoRA adapters."""
        return self.config.model.lora.rank > 0

    def describe(self) -> str:
        """One line: model, algorithm, shapes."""
        return (
            f"{self.config.model.name} ({self.model.num_params() / 1e9:.2f}B, "
            f"{self.model.dtype}), {self.config.algorithm}: {self.num_prompts} prompts x "
            f"{self.group_size}, {self.prompt_len} prompt + {self.response_len} response "
            f"tokens, {self.num_minibatches} minibatches of {self.minibatch_rows} rows, roles "
            f"{', '.join(self.roles)}, {'asynchronous' if self.asynchronous else 'synchronous'}"
        )


def model_config_of(config: ml_collections.ConfigDict) -> ModelConfig:
    """The policy's `ModelConfig` from `config.model` (compute dtype and the dtype weights are
    stored in: float32 master weights under bfloat16 compute), reading no weights.

    Raises:
      ValueError: a name that is neither an architecture, a known model nor a path.
    """
    model = _model_config_of(config)
    param_dtype = config.model.get("param_dtype")
    return model if param_dtype is None else model.replace(param_dtype=param_dtype)


def _model_config_of(config: ml_collections.ConfigDict) -> ModelConfig:
    name, dtype = config.model.name, config.model.dtype
    if name.lower() in ARCHITECTURES:
        return architecture(name, dtype=dtype)
    from jaxrl_llm.models.registry import resolve_model_path

    path = resolve_model_path(name)
    if config.model.init == "random":
        from jaxrl_llm.runners.components import load_policy

        return load_policy(config)[0].config
    if path.endswith(".gguf"):
        from jaxrl_llm.models.gguf_loader import config_from_gguf, read_gguf

        return config_from_gguf(read_gguf(path), dtype=dtype, source=path)
    if os.path.isdir(path):
        import json

        from jaxrl_llm.models.hf import config_from_hf

        config_path = os.path.join(path, "config.json")
        with open(config_path) as f:
            return config_from_hf(json.load(f), dtype=dtype, source=config_path)
    raise ValueError(
        f"config.model.name={name!r}: not an architecture ({', '.join(sorted(ARCHITECTURES))}), "
        "a .gguf file or a Hugging Face directory."
    )


def workload_of(config: ml_collections.ConfigDict, model: ModelConfig | None = None) -> Workload:
    """The `Workload` of a validated run config (`model` overrides `config.model`).

    Raises:
      ValueError: a config the planner cannot size (e.g. multi-turn episodes, whose lengths
        the environment decides), or a `rollout.forward_batch` that does not divide the
        step's rows.
    """
    from jaxrl_llm.algorithms import registry
    from jaxrl_llm.roles.forwards import forward_batch_of

    if config.env.name:
        raise ValueError(
            f"config.env.name={config.env.name!r}: the planner sizes single-turn RL steps; a "
            "multi-turn episode's length is decided by its environment. Plan its single-turn "
            "equivalent (set rollout.max_new_tokens to the episode's token budget)."
        )
    forward_batch_of(config)  # names a chunk that does not divide the step's rows
    algorithm = registry.make(config)
    roles = tuple(algorithm.roles)
    if config.rewards.model:
        roles += ("reward_model",)
    return Workload(
        config=config,
        model=model or model_config_of(config),
        roles=roles,
        num_prompts=config.rollout.num_prompts,
        group_size=config.rollout.group_size,
        prompt_len=config.rollout.min_prompt_bucket,
        response_len=config.rollout.max_new_tokens,
        num_minibatches=config.train.num_minibatches,
        asynchronous=bool(config.async_rl.enabled),
    )


def with_overrides(workload: Workload, **fields: Any) -> Workload:
    """A copy with some fields replaced (e.g. a smaller `response_len` for a quick compile)."""
    return workload._replace(**fields)
