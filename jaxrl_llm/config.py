"""Run configurations (ml_collections): a base plus one section set per algorithm.

    config = config_for("ppo")       # base_config() + PPO's `loss` and `critic` sections

Every field has a comment; the algorithm's sections come from its module
(`jaxrl_llm.algorithms.<name>.default_config`). `validate_config` is the one place a config is
checked (base fields, the sections' own checks, placement, then the algorithm's `validate`) and
names the field and the fix for a bad value; `apply_overrides` names the closest key for an
unknown one (`unknown_key_message`). Reading a config file for its stage is
`jaxrl_llm.stages.load_config`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import ml_collections


def base_config() -> ml_collections.ConfigDict:
    """The fields every online RL run shares (no algorithm section), unlocked.

    `config_for(name)` adds the algorithm's own sections (`config.loss`, and e.g. PPO's
    `config.critic`) and locks it.
    """
    c = ml_collections.ConfigDict()
    # The algorithm, by registry name (jaxrl_llm.algorithms): grpo, ppo, reinforce_pp, remax,
    # online_dpo, rrhf.
    c.algorithm = "grpo"
    # Base seed: data order, rollout sampling (seed + step) and random init derive from it.
    c.seed = 0

    c.model = ml_collections.ConfigDict()
    # A registered name, a .gguf file, a Hugging Face directory, or a Hugging Face id
    # ("owner/name[@revision]") read offline from the local hub cache (docs/models.md).
    c.model.name = "smollm2-135m-instruct"
    # The compute dtype, "float32" or "bfloat16": activations, the KV cache, the rollout's copy
    # of the weights (bfloat16 brings no speed on CPUs without native bf16).
    c.model.dtype = "float32"
    # The dtype the weights are stored and trained in ("float32" or "bfloat16"), and so the
    # optimizer state and checkpoints. "float32" under a bfloat16 dtype is mixed precision: a
    # float32 master copy and float32 Adam moments, cast to bfloat16 inside each jitted program
    # (jaxrl_llm.models.precision). "bfloat16" trains the bfloat16 weights themselves, refused
    # below the learning rate whose updates a bfloat16 weight can keep (about 6e-5).
    c.model.param_dtype = "float32"
    # "pretrained" loads `name`; "random" keeps its tokenizer and builds a random model of `random`.
    c.model.init = "pretrained"
    # Architecture of a random model (vocabulary from the tokenizer).
    c.model.random = ml_collections.ConfigDict(
        dict(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2)
    )
    # LoRA (PERL): rank 0 trains every weight; rank > 0 freezes them and trains adapters of that
    # rank on `targets` (comma-separated weight names), scaled by alpha / rank, with dropout on
    # their input. The reference policy is the base with adapters off (no copy of the weights);
    # the rollout "apply"s the adapters (default: measured faster here, docs/lora.md) or
    # "merge"s them into a decode copy of the weights at each sync. Checkpoints hold the
    # adapters alone. See jaxrl_llm/models/lora.py and docs/lora.md.
    c.model.lora = ml_collections.ConfigDict(
        dict(
            rank=0,
            alpha=32.0,
            dropout=0.0,
            targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
            rollout="apply",
        )
    )

    # The prompts: task, pool sizes, held-out split, prompt format; see jaxrl_llm/data/config.py.
    from jaxrl_llm.data.config import task_section

    c.task = task_section()

    # Reward functions, learned rewards and how they combine; see jaxrl_llm/rewards/config.py.
    from jaxrl_llm.rewards.config import rewards_section

    c.rewards = rewards_section()

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
    # Gather the live rows into a half-size batch when they fit it: finished completions stop
    # costing decode work (identical results; jaxrl_llm.rollout.GenerationConfig).
    c.rollout.compaction = True
    # "identical": a group's G copies of a prompt are prefilled once (exact); "common": also the
    # prefix shared by every prompt (float32 rounding differs slightly); "none".
    c.rollout.prefix_sharing = "identical"
    # The most rows decoded at once: a step's num_prompts * group_size rows go in chunks of
    # this many (the same samples); 0 decodes them all in one program. What keeps a large
    # step's KV cache within a chip (`python -m jaxrl_llm.plan` picks it; docs/scale.md).
    c.rollout.decode_batch = 0
    # Rows per reference / critic-value / reward-model forward; 0: all of a step's rows at once
    # (`python -m jaxrl_llm.plan` picks it; docs/scale.md).
    c.rollout.forward_batch = 0
    # The decode steps' attention: "auto" runs the platform's kernel that reads only each row's
    # filled KV-cache blocks (Pallas paged attention on TPU, split-K decode attention on GPU)
    # where it fits, else "xla", the masked full-cache attention; "kernel" insists on the
    # kernel (CPU: the jnp reference). See jaxrl_llm.rollout.attention_choice.
    c.rollout.decode_attention = "auto"

    c.optimizer = ml_collections.ConfigDict()
    # AdamW peak learning rate, warmup (in optimizer updates) and schedule after it.
    c.optimizer.learning_rate = 3e-5
    c.optimizer.warmup_steps = 2
    c.optimizer.schedule = "constant"
    c.optimizer.weight_decay = 0.0
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.99
    # Global gradient-norm clip.
    c.optimizer.max_grad_norm = 1.0

    c.train = ml_collections.ConfigDict()
    # RL steps (each: one rollout batch, `num_minibatches` optimizer updates).
    c.train.num_steps = 30
    c.train.num_minibatches = 1
    # Micro-batches per optimizer update (gradient accumulation): each minibatch's rows go
    # through the train step this many at a time, their gradients summed with the loss's
    # whole-minibatch token normaliser (identical update, less memory; see
    # jaxrl_llm/algorithms/batch.py). Must divide the rows of a minibatch.
    c.train.grad_accumulation = 1
    # Save a checkpoint every N steps (and at the end).
    c.train.checkpoint_every = 5
    # How many of the newest checkpoints a run keeps (orbax's max_to_keep); a finished run leaves
    # this many. SmolLM2-135M's GRPO state is 1.5 GB (1.4 GiB) a checkpoint: a sweep of many
    # runs wants 1.
    c.train.keep_checkpoints = 3
    # Log sample completions every N steps.
    c.train.sample_every = 5
    # Gradient checkpointing per layer (jaxrl_llm.models.REMAT_POLICIES): "full" keeps one
    # [B, T, D] per layer and recomputes the rest in the backward pass; "dots" also keeps the
    # weight matmuls' outputs; "none" keeps everything. SmolLM2's (32, 96) GRPO step: "full"
    # 2.4 GB of XLA temporaries, "dots" 4.1 GB, "none" 8.7 GB, at about the same speed
    # (experiments/benchmarks/forward.py).
    c.train.remat = "full"
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
    # Wall-time budget of the training loop in seconds (evaluations excluded); the run stops
    # after the first step that ends past it (0: no budget). For equal-time comparisons.
    c.train.max_time_s = 0.0
    # A saved actor train step to run instead of compiling one: the prefix of the files
    # `python -m jaxrl_llm.plan --out DIR --save_executables` writes (DIR/executables/actor_train),
    # as MaxText's compiled_trainstep_file. Minibatches of other shapes compile their own step
    # (summary.json's "planned_step" counts both). "": compile here.
    c.train.planned_step = ""
    # Resume a workdir whose checkpoints were written under other values of fields that shape
    # training (rate, rollout, loss, rewards, stabilisers, seed; `runners.lifecycle` lists the
    # fields free to change, such as evaluation and checkpoint cadence). False: such a resume
    # is refused, naming the fields, since it would continue the old run as if it were new.
    c.train.resume_with_changes = False

    c.eval = ml_collections.ConfigDict()
    # Greedy held-out accuracy before the first and after the last step.
    c.eval.before = True
    c.eval.after = True
    c.eval.batch_size = 50
    c.eval.max_new_tokens = 32
    # Decode the held-out prompts through continuous batching (eval.batch_size slots refilled
    # as rows finish, the chat template's shared prefix prefilled once) instead of fixed batches.
    c.eval.continuous = True
    # Also evaluate every N steps during training (0: only before and after).
    c.eval.every = 0
    # More task presets (or reasoning-gym tasks) evaluated beside the training task, comma
    # separated ("gcd,lcm"), each with eval_size prompts of eval_seed; logged as eval/<task>/...
    c.eval.tasks = ""
    # Sampled completions per prompt for pass@k and maj@k (0: greedy only), at this temperature.
    c.eval.num_samples = 0
    c.eval.ks = (1, 4, 8)
    c.eval.temperature = 0.7
    # What a held-out answer counts as right (jaxrl_llm.evals.scorers), the same ruler for every
    # recipe whatever its training reward: "stated" (the task's check of the stated answer; a
    # completion cut at the token limit states none), "stated_cut_scored", "last_number", or a
    # name registered with jaxrl_llm.evals.register_scorer.
    c.eval.scorer = "stated"
    # Also evaluate the run's task on the selection side of the split (eval_size problems, logged
    # as eval/selection/<metric>): what sweeps prune on and reports choose settings by, so that
    # the test side the unprefixed eval/<metric> figures come from chose nothing.
    c.eval.selection = True

    # Off-policy correction of the policy loss (jaxrl_llm.algorithms.off_policy): none, tis,
    # icepop, decoupled_ppo, aipo; what asynchronous training (config.async_rl) needs.
    from jaxrl_llm.algorithms.off_policy import off_policy_section
    from jaxrl_llm.algorithms.staleness import async_section

    c.off_policy = off_policy_section()
    # Asynchronous training (jaxrl_llm.runners.online_async): generator and learner at once,
    # samples at most max_staleness learner versions old.
    c.async_rl = async_section()
    # Stabilisers of group-advantage RL (dynamic sampling, overlong filtering or penalty, an
    # entropy coefficient adapted to a target); all off by default. See
    # jaxrl_llm/algorithms/stabilisers.py.
    from jaxrl_llm.algorithms.stabilisers import stabilisers_section

    c.stabilise = stabilisers_section()

    # Which devices and meshes the roles run on; see jaxrl_llm/roles/placement.py.
    from jaxrl_llm.roles.placement import placement_section

    c.placement = placement_section()

    # Constraints: judges, CGPO (crpg / crraft / codpo), Lagrangian multipliers and per-class
    # token budgets (IBPO); see jaxrl_llm/constraints/config.py and docs/constraints.md.
    from jaxrl_llm.constraints.config import constraints_section

    c.constraints = constraints_section()

    # Multi-turn episodes (tool use, multi-turn instruction following) instead of one
    # completion per prompt; see jaxrl_llm/envs/config.py.
    from jaxrl_llm.envs.config import env_section

    c.env = env_section()

    # Where metrics go besides the JSONL files: TensorBoard (on), wandb (off; offline by
    # default); see jaxrl_llm/metrics_wandb.py.
    from jaxrl_llm.metrics_wandb import metrics_section

    c.metrics = metrics_section()
    return c


def config_for(algorithm: str = "grpo") -> ml_collections.ConfigDict:
    """The default run config of a registered algorithm: `base_config()` plus its sections.

    Example:
      >>> config = config_for("ppo")     # config.loss (GAE, KL in reward), config.critic
    """
    from jaxrl_llm.algorithms import registry

    c = base_config()
    c.algorithm = algorithm
    for section, fields in registry.get(algorithm).default_config().items():
        c[section] = fields
    c.lock()
    return c


def make_tiny(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Shrinks a config in place to a tiny random model and task: seconds per step, for tests,
    notebooks and sweeps (learning is not expected; the plumbing runs end to end)."""
    with config.unlocked():
        config.model.init = "random"
        config.model.random.update(
            dict(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
        )
        config.task.eval_size = 8
        config.rollout.num_prompts = 2
        config.rollout.group_size = 4
        config.rollout.max_new_tokens = 8
        config.train.num_steps = 4
        config.train.num_minibatches = 2
        config.train.checkpoint_every = 2
        config.train.sample_every = 2
        config.eval.batch_size = 8
        config.eval.max_new_tokens = 8
        config.optimizer.learning_rate = 1e-3
        config.optimizer.warmup_steps = 0
    return config


def grpo_config() -> ml_collections.ConfigDict:
    """The default GRPO configuration (SmolLM2-135M-Instruct, chain_sum), locked."""
    return config_for("grpo")


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


def flat_dict(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a.b": value} of a nested dict such as a saved config.json (lists become tuples, so
    values compare and hash; an empty section has no entry)."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flat_dict(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
    return flat


def config_keys(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """Every dotted key of `config`, sections included: ["algorithm", "train", "train.seed", ...]."""
    keys = []
    for key, value in config.items():
        name = f"{prefix}{key}"
        keys.append(name)
        if isinstance(value, ml_collections.ConfigDict):
            keys.extend(config_keys(value, name + "."))
    return keys


def unknown_key_message(config: ml_collections.ConfigDict, dotted: str, *, prefix: str = "") -> str:
    """One line for a dotted key `config` lacks, with the closest full key if one is near.

    `prefix` is how the user wrote the key's start, e.g. "--config." for a flag:
    `"--config.train.num_stepz is not a config field; did you mean --config.train.num_steps?"`.
    """
    close = difflib.get_close_matches(dotted, config_keys(config), n=1, cutoff=0.6)
    if not close:
        return f"{prefix}{dotted} is not a config field (none is close; check its spelling)."
    return f"{prefix}{dotted} is not a config field; did you mean {prefix}{close[0]}?"


def error_line(error: BaseException) -> str:
    """`error`'s message on one line, without the quotes `str(KeyError(...))` adds."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    return " ".join(str(message).replace("\\n", " ").split()) or type(error).__name__


def apply_overrides(
    config: ml_collections.ConfigDict, overrides: Mapping[str, Any]
) -> ml_collections.ConfigDict:
    """Sets dotted `overrides` ({"rollout.group_size": 4}) on a locked config, in place.

    Raises:
      KeyError: for an unknown key, naming the closest existing key (`unknown_key_message`).
    """
    known = set(config_keys(config))
    for dotted, value in overrides.items():
        if dotted not in known:
            raise KeyError(unknown_key_message(config, dotted))
        *parents, leaf = dotted.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[leaf] = value
    return config
