"""Run configurations (ml_collections): a base plus one section set per algorithm.

    config = config_for("ppo")       # base_config() + PPO's `loss` and `critic` sections
    validate_config(config)          # ValueError naming the field and the fix

- `defaults`: `base_config`, `config_for`, `make_tiny`, `grpo_config`; every field has a
  comment, the algorithm's sections come from its module
  (`jaxrl_llm.algorithms.<name>.default_config`).
- `validation`: `validate_config`, the one place a config is checked (base fields, the
  sections' own checks, placement, then the algorithm's `validate`).
- `overrides`: `apply_overrides` for dotted keys; an unknown one gets the closest key
  (`unknown_key_message`).

Reading a config file for its stage is `jaxrl_llm.stages.load_config`.
"""

from jaxrl_llm.config.defaults import base_config, config_for, grpo_config, make_tiny
from jaxrl_llm.config.overrides import (
    apply_overrides,
    config_keys,
    error_line,
    flat_dict,
    unknown_key_message,
)
from jaxrl_llm.config.validation import (
    DTYPES,
    eval_task_names,
    lora_config_of,
    validate_config,
    validate_precision,
)

__all__ = [
    "DTYPES",
    "apply_overrides",
    "base_config",
    "config_for",
    "config_keys",
    "error_line",
    "eval_task_names",
    "flat_dict",
    "grpo_config",
    "lora_config_of",
    "make_tiny",
    "unknown_key_message",
    "validate_config",
    "validate_precision",
]
