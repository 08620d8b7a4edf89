"""Builds a run's parts from its config: model, tokenizer, data, rewards, generator, optimizer."""

from __future__ import annotations

from typing import NamedTuple

import ml_collections

from jaxrl_llm import gin_bindings
from jaxrl_llm.data import PromptBatcher, ReasoningGymSource
from jaxrl_llm.models import ModelConfig, Tokenizer, Transformer, from_pretrained, init_model
from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf
from jaxrl_llm.models.registry import resolve_model_path
from jaxrl_llm.rewards import RewardRunner, format_reward, task_reward
from jaxrl_llm.training import make_optimizer


class RunParts(NamedTuple):
    """Everything a GRPO run is built from (see `build_parts`)."""

    model: Transformer
    tokenizer: Tokenizer
    train_source: ReasoningGymSource
    eval_source: ReasoningGymSource
    batcher: PromptBatcher
    rewards: RewardRunner
    optimizer: object


def load_policy(config: ml_collections.ConfigDict) -> tuple[Transformer, Tokenizer]:
    """The policy and tokenizer named by `config.model` (pretrained or random with its tokenizer)."""
    if config.model.init == "pretrained":
        return from_pretrained(config.model.name, dtype=config.model.dtype)
    path = resolve_model_path(config.model.name)
    if path.endswith(".gguf"):
        tokenizer = tokenizer_from_gguf(read_gguf(path), source=path)
    else:
        tokenizer = Tokenizer.from_hf_directory(path)
    r = config.model.random
    model_config = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=r.hidden_size,
        intermediate_size=r.intermediate_size,
        num_layers=r.num_layers,
        num_heads=r.num_heads,
        num_kv_heads=r.num_kv_heads,
        tie_word_embeddings=True,
        dtype=config.model.dtype,
        eos_token_id=tokenizer.eos_token_id,
    )
    return init_model(model_config, seed=config.seed), tokenizer


def build_rewards(config: ml_collections.ConfigDict) -> RewardRunner:
    """The weighted reward functions of `config.rewards` ("task" always present for accuracy).

    gin bindings win: `format_reward.max_chars = 40`, `RewardRunner.timeout_s = 2.0`, or a whole
    `RewardRunner.functions = {"task": @task_reward, ...}` with matching `RewardRunner.weights`.
    """
    functions = {"task": gin_bindings.bound(task_reward)}
    weights = {"task": config.rewards.task_weight}
    if config.rewards.format_weight:
        functions["format"] = gin_bindings.bound(format_reward)
        weights["format"] = config.rewards.format_weight
    runner = gin_bindings.configured(
        RewardRunner, functions=functions, weights=weights, timeout_s=config.rewards.timeout_s
    )
    if "task" not in runner.functions:
        raise ValueError(
            f"gin: RewardRunner.functions must include 'task' (accuracy is measured with it); "
            f"got {sorted(runner.functions)}."
        )
    return runner


def build_parts(config: ml_collections.ConfigDict) -> RunParts:
    """Loads the model and builds data, rewards and optimizer from a validated config."""
    model, tokenizer = load_policy(config)
    task_kwargs = config.task.kwargs.to_dict()
    train_source = ReasoningGymSource(
        config.task.name, seed=config.seed, size=config.task.train_size, **task_kwargs
    )
    eval_source = ReasoningGymSource(
        config.task.name, seed=config.task.eval_seed, size=config.task.eval_size, **task_kwargs
    )
    batcher = PromptBatcher(train_source, batch_size=config.rollout.num_prompts, seed=config.seed)
    updates = config.train.num_steps * config.train.num_minibatches
    o = config.optimizer
    optimizer = gin_bindings.configured(  # `make_optimizer.b2 = ...` wins
        make_optimizer,
        learning_rate=o.learning_rate,
        warmup_steps=o.warmup_steps,
        total_steps=updates,
        schedule=o.schedule,
        weight_decay=o.weight_decay,
        b1=o.b1,
        b2=o.b2,
        max_grad_norm=o.max_grad_norm,
    )
    return RunParts(
        model, tokenizer, train_source, eval_source, batcher, build_rewards(config), optimizer
    )
