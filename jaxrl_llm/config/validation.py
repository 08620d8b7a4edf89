"""`validate_config`: the one place a run config is checked.

The base fields here, the sections' own checks (each package validates its section: data,
rewards, envs, placement, constraints, metrics ...), then the algorithm's `validate`; every error
names the field and the fix, before any model loads.
"""

from __future__ import annotations

import ml_collections

_POSITIVE_INTS = (
    "rollout.num_prompts",
    "rollout.group_size",
    "rollout.max_new_tokens",
    "rewards.length_max_words",
    "train.num_steps",
    "train.num_minibatches",
    "train.grad_accumulation",
    "train.checkpoint_every",
    "train.keep_checkpoints",
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


def lora_config_of(config: ml_collections.ConfigDict):
    """The `LoraConfig` of `config.model.lora`, or None when rank is 0 (or the section absent).

    Raises ValueError naming the config field (e.g. `config.model.lora.targets`)."""
    from jaxrl_llm.models.lora import ROLLOUT_MODES, LoraConfig

    section = config.model.get("lora")
    if section is None or section.rank == 0:
        return None
    if section.rollout not in ROLLOUT_MODES:
        raise ValueError(
            f"config.model.lora.rollout={section.rollout!r} must be one of {ROLLOUT_MODES}."
        )
    targets = tuple(t.strip() for t in section.targets.split(",") if t.strip())
    try:
        return LoraConfig(
            rank=section.rank, alpha=section.alpha, dropout=section.dropout, targets=targets
        )
    except ValueError as error:
        raise ValueError(f"config.model.lora: {error}".replace("LoraConfig: ", "")) from None


DTYPES = ("float32", "bfloat16")


def validate_precision(config: ml_collections.ConfigDict) -> None:
    """Checks `config.model.dtype` / `param_dtype` and that every optimizer section's learning
    rate makes updates the stored weights can keep (`check_update_precision`). Every stage's
    config is checked here (RL, SFT, reward models, preference ...).

    Raises:
      ValueError: naming the field and the fix.
    """
    from jaxrl_llm.training.optimizer import check_update_precision

    model = config.model
    if model.dtype not in DTYPES:
        raise ValueError(f"config.model.dtype={model.dtype!r} must be one of {DTYPES}.")
    param_dtype = model.get("param_dtype", model.dtype)
    if param_dtype not in DTYPES:
        raise ValueError(f"config.model.param_dtype={param_dtype!r} must be one of {DTYPES}.")
    if param_dtype == "bfloat16" and model.dtype == "float32":
        raise ValueError(
            "config.model.param_dtype='bfloat16' is narrower than config.model.dtype='float32': "
            "set param_dtype='float32' (or dtype='bfloat16' to compute in bfloat16 too)."
        )
    for section in ("optimizer", "critic"):
        if section in config and "learning_rate" in config[section]:
            check_update_precision(
                config[section].learning_rate,
                param_dtype,
                lr_field=f"config.{section}.learning_rate",
                dtype_field="config.model.param_dtype",
            )


def validate_config(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first field with an impossible value, and the fix.

    The one place a run config is checked: the base fields here, then the algorithm's own
    rules (its `validate`, registered beside it in `jaxrl_llm.algorithms`).
    """
    from jaxrl_llm.algorithms import registry

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
    from jaxrl_llm.algorithms.batch import check_grad_accumulation

    check_grad_accumulation(config)  # micro-batches that divide a minibatch, a loss to weigh
    if config.train.pack_width and config.train.pack_width < (
        config.rollout.min_prompt_bucket + config.rollout.max_new_tokens
    ):
        raise ValueError(
            f"config.train.pack_width={config.train.pack_width} is narrower than a rollout row "
            f"(rollout.min_prompt_bucket + rollout.max_new_tokens = "
            f"{config.rollout.min_prompt_bucket + config.rollout.max_new_tokens}): raise it, or "
            "set 0 for the rollout's width."
        )
    planned = config.train.get("planned_step", "")
    if planned:
        from jaxrl_llm.sharding.executables import executable_record

        if not isinstance(planned, str):
            raise ValueError(f"config.train.planned_step={planned!r} must be a path prefix.")
        try:
            executable_record(planned)
        except FileNotFoundError as error:
            raise ValueError(f"config.train.planned_step={planned!r}: {error}") from None
    decode_batch = config.rollout.get("decode_batch", 0)
    if not isinstance(decode_batch, int) or decode_batch < 0:
        raise ValueError(
            f"config.rollout.decode_batch={decode_batch!r} must be an int >= 0 (0: every row "
            "of a step in one decode program)."
        )
    from jaxrl_llm.roles.forwards import forward_batch_of

    forward_batch_of(config)  # a chunk that does not divide the step's rows: one line
    if not config.rollout.temperature > 0:
        raise ValueError(
            f"config.rollout.temperature={config.rollout.temperature} must be > 0 for training."
        )
    if config.model.init not in ("pretrained", "random"):
        raise ValueError(
            f"config.model.init={config.model.init!r} must be 'pretrained' or 'random'."
        )
    validate_precision(config)
    lora_config_of(config)  # names a bad config.model.lora field
    from jaxrl_llm.constraints.config import constraint_spec

    constraint_spec(config)  # names a bad config.constraints field
    from jaxrl_llm.models.transformer import REMAT_POLICIES

    if config.train.remat not in REMAT_POLICIES:
        raise ValueError(
            f"config.train.remat={config.train.remat!r} must be one of {REMAT_POLICIES}."
        )
    from jaxrl_llm.rollout.attention_choice import DECODE_ATTENTION

    decode_attention = config.rollout.get("decode_attention", "auto")
    if decode_attention not in DECODE_ATTENTION:
        raise ValueError(
            f"config.rollout.decode_attention={decode_attention!r} must be one of "
            f"{DECODE_ATTENTION}."
        )
    from jaxrl_llm.rollout.prefix_sharing import PREFIX_SHARING_MODES

    if config.rollout.prefix_sharing not in PREFIX_SHARING_MODES:
        raise ValueError(
            f"config.rollout.prefix_sharing={config.rollout.prefix_sharing!r} must be one of "
            f"{PREFIX_SHARING_MODES}."
        )
    from jaxrl_llm.data.config import validate_data_section
    from jaxrl_llm.data.presets import resolve_task, task_pool
    from jaxrl_llm.data.split import (
        DEFAULT_SELECTION_FRACTION,
        check_side_fractions,
        check_split_by,
    )
    from jaxrl_llm.data.user_data import uses_user_data
    from jaxrl_llm.envs.config import validate_env_section
    from jaxrl_llm.envs.task_registry import has_own_data

    validate_env_section(config)
    check_side_fractions(
        config.task.held_out_fraction,
        config.task.get("selection_fraction", DEFAULT_SELECTION_FRACTION),
        prefix="config.task.",
    )
    check_split_by(config.task.get("split_by", "problem"))
    validate_data_section(config)
    if not has_own_data(config.env.name):  # else the episode task makes its examples
        if not uses_user_data(config.task):  # else config.task.name only labels the data
            resolve_task(config.task.name, config.task.kwargs.to_dict())  # a bad task or field
        # a test or selection side too small for eval_size stops the run here, before the
        # model loads
        task_pool(config.task, side="test")
        if config.eval.get("selection", False):
            task_pool(config.task, side="selection")
    for name in eval_task_names(config):
        resolve_task(name)
        task_pool(config.task, side="test", name=name)  # enough test problems
    if config.eval.num_samples < 0 or (config.eval.num_samples and not config.eval.temperature > 0):
        raise ValueError(
            f"config.eval.num_samples={config.eval.num_samples} must be >= 0, and sampling needs "
            f"config.eval.temperature > 0 (got {config.eval.temperature})."
        )
    from jaxrl_llm.evals.scorers import get_scorer

    get_scorer(config.eval.scorer)  # one line naming config.eval.scorer and the registered names
    if config.train.max_time_s < 0 or config.eval.every < 0:
        raise ValueError(
            f"config.train.max_time_s={config.train.max_time_s} and "
            f"config.eval.every={config.eval.every} must be >= 0 (0 disables)."
        )
    from jaxrl_llm.rewards.config import validate_rewards_section

    validate_rewards_section(config)
    from jaxrl_llm.roles.placement import validate_placement

    validate_placement(config.placement)
    from jaxrl_llm.algorithms.off_policy import validate_off_policy_section
    from jaxrl_llm.algorithms.staleness import validate_async_section

    validate_off_policy_section(config)
    validate_async_section(config)
    from jaxrl_llm.metrics_wandb import validate_metrics_section

    validate_metrics_section(config)
    from jaxrl_llm.algorithms.stabilisers import validate_stabilisers

    if "stabilise" in config:
        validate_stabilisers(config)
    try:
        spec = registry.get(config.algorithm)
    except KeyError as e:
        raise ValueError(e.args[0]) from e
    _check_sections(config, spec)
    spec.validate(config)
    dense = config.rewards.get("process_placement", "summed") == "dense"
    if dense and not spec.make(config).needs("critic"):
        raise ValueError(
            f"config.rewards.process_placement='dense' needs an algorithm with a critic, whose "
            f"GAE turns per-token rewards into advantages; config.algorithm="
            f"{config.algorithm!r} has none: use PPO (experiments/configs/"
            "ppo_prm_steps_smollm2.py) or process_placement='summed'."
        )
    pretrain = config.critic.get("pretrain_steps", 0) if "critic" in config else 0
    if pretrain and not spec.make(config).needs("critic"):
        raise ValueError(
            f"config.critic.pretrain_steps={pretrain} pretrains a critic, and config.algorithm="
            f"{config.algorithm!r} has none: set config.critic.pretrain_steps=0, or use PPO "
            "(jaxrl_llm.config.config_for('ppo'))."
        )


def eval_task_names(config: ml_collections.ConfigDict) -> list[str]:
    """The extra evaluation tasks of `config.eval.tasks` ("gcd, lcm" -> ["gcd", "lcm"])."""
    return [name.strip() for name in config.eval.tasks.split(",") if name.strip()]


def _check_sections(config, spec) -> None:
    """The config carries every field of the algorithm's sections (it was built for it)."""
    for section, defaults in spec.default_config().items():
        have = config.get(section)
        missing = sorted(set(defaults.keys()) - set(have.keys() if have is not None else ()))
        if missing:
            raise ValueError(
                f"config.algorithm={spec.name!r} needs config.{section}.{missing[0]} (and "
                f"{len(missing) - 1} more), which this config lacks: start from "
                f"jaxrl_llm.config.config_for({spec.name!r}) (e.g. experiments/configs/"
                f"{spec.name}_smollm2.py) instead of switching config.algorithm alone."
            )
