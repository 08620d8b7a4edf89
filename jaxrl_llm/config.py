"""The GRPO run configuration (ml_collections), its validation, and loading with overrides.

Every field has a comment; `validate_config` names the field and the fix for a bad value, and
`load_config` suggests close matches for an unknown key.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from collections.abc import Mapping
from typing import Any

import ml_collections


def grpo_config() -> ml_collections.ConfigDict:
    """The default GRPO configuration (SmolLM2-135M-Instruct, chain_sum), locked."""
    c = ml_collections.ConfigDict()
    # Base seed: data order, rollout sampling (seed + step) and random init derive from it.
    c.seed = 0

    c.model = ml_collections.ConfigDict()
    # A registered name, a .gguf file or a Hugging Face directory.
    c.model.name = "smollm2-135m-instruct"
    # "float32" or "bfloat16" (bfloat16 brings no speed on CPUs without native bf16).
    c.model.dtype = "float32"
    # "pretrained" loads `name`; "random" keeps its tokenizer and builds a random model of `random`.
    c.model.init = "pretrained"
    # Architecture of a random model (vocabulary from the tokenizer).
    c.model.random = ml_collections.ConfigDict(
        dict(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2)
    )

    c.task = ml_collections.ConfigDict()
    # reasoning-gym generator; SmolLM2-135M-Instruct starts near 30% here (last-number answers).
    c.task.name = "chain_sum"
    # Keyword arguments of the generator: two terms of one or two digits.
    c.task.kwargs = ml_collections.ConfigDict(
        dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2)
    )
    # Size of the training pool (cycled in seeded epochs) and its seed offset.
    c.task.train_size = 10_000
    # Held-out evaluation prompts: same generator, another seed.
    c.task.eval_size = 200
    c.task.eval_seed = 1_000_003
    # System message; None keeps the chat template's default.
    c.task.system_prompt = ml_collections.FieldReference(None, field_type=str)
    # Text appended to every question.
    c.task.instruction_suffix = ""

    c.rewards = ml_collections.ConfigDict()
    # Weight of the task scorer on the last number of the completion (1 = correct).
    c.rewards.task_weight = 1.0
    # Weight of the optional format reward (0 disables it).
    c.rewards.format_weight = 0.0
    # Seconds a reward function may take per sample before it counts as 0.
    c.rewards.timeout_s = 5.0

    c.rollout = ml_collections.ConfigDict()
    # Prompts per step and completions per prompt (the GRPO group).
    c.rollout.num_prompts = 8
    c.rollout.group_size = 4
    # Most new tokens per completion.
    c.rollout.max_new_tokens = 32
    # Sampling temperature (the trainer's log-probs use the same).
    c.rollout.temperature = 0.7
    # Prompts are right-padded to at least this many tokens: one shape, one compiled program.
    c.rollout.min_prompt_bucket = 64

    c.loss = ml_collections.ConfigDict()
    # PPO clip range [1 - clip_low, 1 + clip_high].
    c.loss.clip_low = 0.2
    c.loss.clip_high = 0.28
    # KL penalty to the frozen initial policy; 0 skips the reference forward.
    c.loss.kl_beta = 0.0
    # KL estimator: k1, k2, k3, k1+, k3+.
    c.loss.kl_estimator = "k3"
    # Entropy bonus weight.
    c.loss.entropy_coef = 0.0
    # Loss aggregation: token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm.
    c.loss.agg = "token-mean"
    # Advantage estimator: "grpo" or "rloo"; normalize_std=False is Dr. GRPO.
    c.loss.advantage = "grpo"
    c.loss.normalize_std = True

    c.optimizer = ml_collections.ConfigDict()
    # AdamW peak learning rate, warmup (in optimizer updates) and schedule after it.
    c.optimizer.learning_rate = 2e-5
    c.optimizer.warmup_steps = 2
    c.optimizer.schedule = "constant"
    c.optimizer.weight_decay = 0.0
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.99
    # Global gradient-norm clip.
    c.optimizer.max_grad_norm = 1.0

    c.train = ml_collections.ConfigDict()
    # RL steps (each: one rollout batch, `num_minibatches` optimizer updates).
    c.train.num_steps = 15
    c.train.num_minibatches = 1
    # Save a checkpoint every N steps (and at the end).
    c.train.checkpoint_every = 5
    # Log sample completions every N steps.
    c.train.sample_every = 5
    # Gradient checkpointing per layer: activations memory of one [B, T, D] per layer for about
    # a third more compute. SmolLM2 at 32 x 96 tokens fits in about 11 GB without it.
    c.train.remat = False
    # Sequence packing (jaxrl_llm.training.packing): several sequences per row of the train
    # batch, so padding costs no compute; needs loss.agg = "token-mean". Rows are rounded up to
    # a multiple of num_minibatches * pack_row_multiple (each new row count compiles once).
    c.train.pack_sequences = False
    c.train.pack_row_multiple = 4
    # Width of a packed row; 0 = the rollout's width (prompt bucket + max_new_tokens). Wider rows
    # leave less unused at each row's end; must be at least the rollout's width.
    c.train.pack_width = 0
    # Stop after this many consecutive steps whose loss or gradients were not finite.
    c.train.max_consecutive_nonfinite = 3

    c.eval = ml_collections.ConfigDict()
    # Greedy held-out accuracy before the first and after the last step.
    c.eval.before = True
    c.eval.after = True
    c.eval.batch_size = 50
    c.eval.max_new_tokens = 32

    c.lock()
    return c


_POSITIVE_INTS = (
    "rollout.num_prompts",
    "rollout.group_size",
    "rollout.max_new_tokens",
    "train.num_steps",
    "train.num_minibatches",
    "train.checkpoint_every",
    "rollout.min_prompt_bucket",
    "train.sample_every",
    "eval.batch_size",
    "eval.max_new_tokens",
    "task.train_size",
    "task.eval_size",
    "train.max_consecutive_nonfinite",
    "train.pack_row_multiple",
)


def _get(config, dotted: str):
    value = config
    for part in dotted.split("."):
        value = value[part]
    return value


def validate_config(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first field with an impossible value, and the fix."""
    for field in _POSITIVE_INTS:
        value = _get(config, field)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"config.{field}={value!r} must be a positive integer.")
    sequences = config.rollout.num_prompts * config.rollout.group_size
    if sequences % config.train.num_minibatches:
        raise ValueError(
            f"config.train.num_minibatches={config.train.num_minibatches} must divide "
            f"num_prompts * group_size = {sequences} sequences per step."
        )
    if config.train.pack_sequences and config.loss.agg != "token-mean":
        raise ValueError(
            f"config.train.pack_sequences=True needs config.loss.agg='token-mean' (got "
            f"{config.loss.agg!r}): set one or the other."
        )
    if config.train.pack_width and config.train.pack_width < (
        config.rollout.min_prompt_bucket + config.rollout.max_new_tokens
    ):
        raise ValueError(
            f"config.train.pack_width={config.train.pack_width} is narrower than a rollout row "
            f"(rollout.min_prompt_bucket + rollout.max_new_tokens = "
            f"{config.rollout.min_prompt_bucket + config.rollout.max_new_tokens}): raise it, or "
            "set 0 for the rollout's width."
        )
    if config.rollout.group_size < 2:
        raise ValueError(
            "config.rollout.group_size must be >= 2: GRPO compares completions within a group."
        )
    if not config.rollout.temperature > 0:
        raise ValueError(
            f"config.rollout.temperature={config.rollout.temperature} must be > 0 for training."
        )
    if config.model.init not in ("pretrained", "random"):
        raise ValueError(
            f"config.model.init={config.model.init!r} must be 'pretrained' or 'random'."
        )
    if config.model.dtype not in ("float32", "bfloat16"):
        raise ValueError(
            f"config.model.dtype={config.model.dtype!r} must be 'float32' or 'bfloat16'."
        )
    if config.loss.advantage not in ("grpo", "rloo"):
        raise ValueError(
            f"config.loss.advantage={config.loss.advantage!r} must be 'grpo' or 'rloo'."
        )
    if config.loss.kl_beta < 0:
        raise ValueError(f"config.loss.kl_beta={config.loss.kl_beta} must be >= 0.")


def _flatten(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in config.items():
        name = f"{prefix}{key}"
        keys.append(name)
        if isinstance(value, ml_collections.ConfigDict):
            keys.extend(_flatten(value, name + "."))
    return keys


def apply_overrides(
    config: ml_collections.ConfigDict, overrides: Mapping[str, Any]
) -> ml_collections.ConfigDict:
    """Sets dotted `overrides` ({"rollout.group_size": 4}) on a locked config, in place.

    Raises:
      KeyError: for an unknown key, listing the closest existing keys.
    """
    known = _flatten(config)
    for dotted, value in overrides.items():
        if dotted not in known:
            close = difflib.get_close_matches(dotted, known, n=3, cutoff=0.6)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"Unknown config key {dotted!r}.{hint}")
        *parents, leaf = dotted.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[leaf] = value
    return config


def load_config(path: str, overrides: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
    """Loads `get_config()` from a config file, applies overrides, validates."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Config file not found: {path!r}.")
    spec = importlib.util.spec_from_file_location(f"_config_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    apply_overrides(config, overrides or {})
    validate_config(config)
    return config
