"""Builds a run from its config: model, tokenizer, data, rewards, optimizers, and the roles."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import ml_collections
from flax import nnx

from jaxrl_llm import gin_bindings
from jaxrl_llm.algorithms.base import Algorithm
from jaxrl_llm.config import eval_task_names, lora_config_of
from jaxrl_llm.constraints import JudgeMixture
from jaxrl_llm.constraints.config import build_judges, judge_names
from jaxrl_llm.constraints.llm_judge import LLMJudge
from jaxrl_llm.data import PromptBatcher, ReasoningGymSource
from jaxrl_llm.data.presets import task_pool
from jaxrl_llm.evals import SELECTION_SET, EvalSet
from jaxrl_llm.evals.scorers import DEFAULT_SCORER, HeldOutScorer, get_scorer
from jaxrl_llm.models import ModelConfig, Tokenizer, Transformer, from_pretrained, init_model
from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf
from jaxrl_llm.models.heads import load_scalar_model
from jaxrl_llm.models.lora import add_adapters, strip_adapters
from jaxrl_llm.models.precision import frozen_copy
from jaxrl_llm.models.registry import resolve_model_path
from jaxrl_llm.rewards import (
    RewardRunner,
    chance_correction,
    exact_task_reward,
    format_reward,
    length_reward,
    task_answer_prior,
    task_reward,
)
from jaxrl_llm.rewards.ensemble import EnsembleReward, WhitenedReward
from jaxrl_llm.rewards.process import ProcessReward
from jaxrl_llm.rewards.user_loading import UserRewardFns, check_reward_columns, user_rewards
from jaxrl_llm.roles import (
    Critic,
    Learner,
    ModelReward,
    Placement,
    Reference,
    RewardRole,
    RolloutWorker,
    forward_batch_of,
    init_value_model,
    make_placement,
)
from jaxrl_llm.training import make_optimizer


class RunParts(NamedTuple):
    """Everything an online run is built from before its roles (see `build_parts`)."""

    model: Transformer
    tokenizer: Tokenizer
    train_source: ReasoningGymSource
    batcher: PromptBatcher
    rewards: RewardRunner
    optimizer: object


def load_policy(config: ml_collections.ConfigDict) -> tuple[Transformer, Tokenizer]:
    """The policy and tokenizer named by `config.model` (pretrained or random with its tokenizer)."""
    # Mixed precision: weights stored in param_dtype (the float32 master), programs compute in
    # dtype (`jaxrl_llm.models.precision`).
    param_dtype = config.model.get("param_dtype", config.model.dtype)
    if config.model.init == "pretrained":
        return from_pretrained(config.model.name, dtype=config.model.dtype, param_dtype=param_dtype)
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
        param_dtype=param_dtype,
        eos_token_id=tokenizer.eos_token_id,
    )
    return init_model(model_config, seed=config.seed), tokenizer


def with_lora(model: Transformer, config: ml_collections.ConfigDict) -> Transformer:
    """`model` with fresh LoRA adapters when `config.model.lora.rank > 0` (seeded by
    `config.seed`), else `model` unchanged."""
    lora = lora_config_of(config)
    return model if lora is None else add_adapters(model, lora, seed=config.seed)


def build_rewards(
    config: ml_collections.ConfigDict, reward_fns: UserRewardFns | None = None
) -> RewardRunner:
    """The weighted reward functions of `config.rewards` ("task" always present for accuracy),
    then the user's: `config.rewards.functions` and `reward_fns` (Python callables, or
    `{name: fn}`), in TRL's batch shape (`jaxrl_llm.rewards.user`).

    "task" reads answers with `config.rewards.answer_rule` (so does the evaluator, through the
    runner's `answer_rule`); with `config.rewards.chance_correction`, "chance" (weighted like
    "task") makes their sum the chance-corrected reward of `jaxrl_llm.rewards.chance`, with q
    from the run's training pool, while "task" stays the plain score that accuracy counts.

    A reward function's own keyword arguments can be bound with gin (`format_reward.max_chars =
    40`): the functions are leaves gin may configure; nothing else here reads gin.
    """
    task = task_reward if config.rewards.partial_credit else exact_task_reward
    rule = config.rewards.get("answer_rule", "last_number")  # absent from older runs' configs
    # the evaluator reads answers with the runner's answer_rule, "task" and "chance" with this
    functions = {"task": functools.partial(gin_bindings.bound(task), rule=rule)}
    weights = {"task": config.rewards.task_weight}
    if config.rewards.get("chance_correction"):  # task + chance = Cohen's kappa of the sample
        prior = task_answer_prior(config.task, seed=config.seed)
        functions["chance"] = functools.partial(
            chance_correction, prior=prior, task=gin_bindings.bound(task), rule=rule
        )
        weights["chance"] = config.rewards.task_weight
    if config.rewards.format_weight:
        functions["format"] = gin_bindings.bound(format_reward)
        weights["format"] = config.rewards.format_weight
    if config.rewards.get("length_weight"):
        max_words = config.rewards.length_max_words
        functions["length"] = functools.partial(length_reward, max_words=max_words)
        weights["length"] = config.rewards.length_weight
    # -- the user's reward functions (jaxrl_llm.rewards.user_loading) -------------------------
    user_functions, user_weights = user_rewards(
        config.rewards.get("functions", ""),  # absent from older runs' configs
        config.rewards.get("function_weights", ""),
        reward_fns,
        on_error=config.rewards.get("on_error", "skip"),
    )
    if user_functions and config.env.name:
        raise ValueError(
            f"reward functions {list(user_functions)} score single-turn completions; episodes "
            f"of config.env.name={config.env.name!r} are scored by their environment: score "
            "inside the environment's step, or leave config.rewards.functions and reward_fns "
            "empty."
        )
    functions.update(user_functions)
    weights.update(user_weights)
    return RewardRunner(
        functions, weights=weights, timeout_s=config.rewards.timeout_s, answer_rule=rule
    )


def build_scorer(config: ml_collections.ConfigDict) -> HeldOutScorer:
    """The held-out scorer of `config.eval.scorer` (`jaxrl_llm.evals.scorers`): what every
    evaluation of the run counts as right, apart from the reward that trains it."""
    return get_scorer(config.eval.get("scorer", DEFAULT_SCORER))


def total_updates(config: ml_collections.ConfigDict) -> int:
    """Optimizer updates of a whole run: one per minibatch of every RL step."""
    return config.train.num_steps * config.train.num_minibatches


def build_optimizer(
    section: ml_collections.ConfigDict, total_updates: int, field: str = "config.optimizer"
):
    """AdamW from a config section with learning_rate, warmup_steps and max_grad_norm (and
    optionally schedule, weight_decay, b1, b2): `config.optimizer` or `config.critic`, named
    by `field` in an error."""
    return make_optimizer(
        learning_rate=section.learning_rate,
        warmup_steps=section.warmup_steps,
        total_steps=total_updates,
        schedule=section.get("schedule", "constant"),
        weight_decay=section.get("weight_decay", 0.0),
        b1=section.get("b1", 0.9),
        b2=section.get("b2", 0.99),
        max_grad_norm=section.max_grad_norm,
        field=field,
    )


def build_parts(
    config: ml_collections.ConfigDict, reward_fns: UserRewardFns | None = None
) -> RunParts:
    """Loads the model and builds data, rewards and optimizer from a validated config (and
    the user's Python reward functions, `build_rewards`)."""
    model, tokenizer = load_policy(config)
    model = with_lora(model, config)
    if config.env.name:  # multi-turn episodes: the episode task's examples
        from jaxrl_llm.envs.tasks import episode_task

        train_source = episode_task(config).examples("train", config.seed, config.task.train_size)
    else:
        train_source = task_pool(config.task, side="train", seed=config.seed)
    batcher = PromptBatcher(train_source, batch_size=config.rollout.num_prompts, seed=config.seed)
    optimizer = build_optimizer(config.optimizer, total_updates(config))
    # (tests replace build_rewards with a one-argument function)
    rewards = build_rewards(config) if reward_fns is None else build_rewards(config, reward_fns)
    if len(train_source):  # the columns user rewards ask for, before the first step
        check_reward_columns(rewards.functions, train_source[0])
    return RunParts(model, tokenizer, train_source, batcher, rewards, optimizer)


def build_eval_sets(
    config: ml_collections.ConfigDict,
    names: Sequence[str] | None = None,
    *,
    size: int | None = None,
    seed: int | None = None,
) -> list[EvalSet]:
    """Held-out prompt sets of a run: one `EvalSet` per task name.

    Args:
      config: the run config.
      names: task presets or reasoning-gym tasks (default: the run's task, then each of
        `config.eval.tasks` not already listed). The run's own task keeps its generator fields
        (`config.task.kwargs`); other tasks use their presets.
      size: prompts per set (default `config.task.eval_size`).
      seed: the seed their draw from the held-out side uses (default `config.task.eval_seed`).

    Every set holds distinct problems of the test side of the split (`jaxrl_llm.data.split`),
    which no training pool draws from. By default (`names` None) and with
    `config.eval.selection`, a last set named `SELECTION_SET` holds the run's task on the
    selection side: what settings are chosen by, apart from the test side reports show.
    """
    selection = names is None and config.eval.get("selection", False)
    if names is None:
        names = [config.task.name] + [n for n in eval_task_names(config) if n != config.task.name]
    sets = [
        EvalSet(
            name,
            list(task_pool(config.task, side="test", name=name, size=size, eval_seed=seed)),
        )
        for name in names
    ]
    if selection:
        pool = task_pool(config.task, side="selection", size=size, eval_seed=seed)
        sets.append(EvalSet(SELECTION_SET, list(pool)))
    return sets


class Roles(NamedTuple):
    """The roles of one run (None for those the algorithm does not need)."""

    placement: Placement
    actor: Learner
    rollout: RolloutWorker
    reward: RewardRole
    reference: Reference | None = None
    critic: Critic | None = None


def build_roles(
    config: ml_collections.ConfigDict,
    algorithm: Algorithm,
    parts: RunParts,
    devices: Sequence[jax.Device] | None = None,
) -> Roles:
    """Places the roles `algorithm` needs on the meshes of `config.placement` over `devices`
    (default: all of `jax.devices()`; a process of a two-process run passes its local ones).

    The reference and the critic copy the policy's weights before the actor takes them over
    (the actor's train step donates its buffers). With LoRA the reference is the actor's own
    frozen base (adapters off), and the critic starts from the base model. The frozen forwards
    run `config.rollout.forward_batch` rows at a time (`jaxrl_llm.roles.forwards`).
    """
    placement = make_placement(config.placement, devices)
    chunk = forward_batch_of(config)
    policy = parts.model
    reference = critic = None
    lora = lora_config_of(config) is not None
    temperature = config.rollout.temperature
    judge_base = None
    if (
        not lora
        and "constraints" in config
        and "llm" in judge_names(config)
        and not algorithm.needs("reference")
    ):
        # a frozen copy of the initial weights before the actor takes the policy's over
        judge_base = (policy, frozen_copy(policy, nnx.state(policy, nnx.Param)))
    if algorithm.needs("reference") and not lora:
        reference = Reference(
            policy,
            placement.train_mesh,
            temperature=temperature,
            forward_batch=chunk,
            # a reference that follows the policy (config.reference, the algorithms that have it)
            ema_decay=config.reference.ema_decay if "reference" in config else 0.0,
        )
    if algorithm.needs("critic"):
        trunk = strip_adapters(policy) if lora else policy
        critic = Critic(
            init_value_model(config.critic.init, trunk, seed=config.seed),
            build_optimizer(config.critic, total_updates(config), "config.critic"),
            algorithm.critic_loss,
            placement.train_mesh,
            forward_batch=chunk,
        )
    rollout = RolloutWorker(
        policy,
        parts.tokenizer,
        placement.rollout_mesh,
        max_new_tokens=config.rollout.max_new_tokens,
        temperature=config.rollout.temperature,
        min_prompt_bucket=config.rollout.min_prompt_bucket,
        compaction=config.rollout.compaction,
        prefix_sharing=config.rollout.prefix_sharing,
        lora_rollout=config.model.lora.rollout if lora else "apply",
        decode_batch=config.rollout.get("decode_batch", 0),
        decode_attention=config.rollout.decode_attention,
    )
    actor = Learner(
        policy, parts.optimizer, algorithm.loss, placement.train_mesh, dropout_seed=config.seed
    )
    if config.train.get("planned_step"):
        use_planned_step(actor, config.train.planned_step, placement.train_mesh)
    if algorithm.needs("reference") and lora:
        reference = Reference.of_lora_base(
            actor, policy, temperature=temperature, forward_batch=chunk
        )
    if lora:  # the LLM judge's frozen weights: the base the actor never trains
        judge_base = (strip_adapters(policy), actor.frozen)
    elif reference is not None:
        judge_base = (policy, reference.params)
    reward_model = None
    if config.rewards.model:
        models = [
            ModelReward(
                load_scalar_model(path.strip()),
                parts.tokenizer,
                batch_size=chunk or config.rollout.num_prompts * config.rollout.group_size,
                mesh=placement.train_mesh,
            )
            for path in config.rewards.model.split(",")
        ]
        if config.rewards.get("model_whiten", False):
            models = [WhitenedReward(model) for model in models]
        reward_model = models[0]
        if len(models) > 1:
            reward_model = EnsembleReward(
                models, mode=config.rewards.ensemble, k=config.rewards.ensemble_k
            )
    process = None
    if config.rewards.process_model:
        process = ProcessReward(
            load_scalar_model(config.rewards.process_model),
            parts.tokenizer,
            refinement=config.rewards.process_refinement,
            eta=config.rewards.process_eta,
            marker=config.rewards.step_marker,
        )
    reward = RewardRole(
        parts.rewards,
        reward_model,
        model_weight=config.rewards.model_weight,
        process=process,
        process_weight=config.rewards.process_weight,
        judges=build_judge_mixture(config, parts, judge_base),
        step_marker=config.rewards.step_marker if config.rewards.get("count_steps") else None,
    )
    return Roles(placement, actor, rollout, reward, reference, critic)


def build_judge_mixture(config, parts: RunParts, base) -> JudgeMixture | None:
    """The judges of `config.constraints.judges` (None without any); the LLM judge reads
    `base` = (graph model, frozen params): the policy's base weights."""
    if "constraints" not in config or not judge_names(config):
        return None

    def llm(question: str, threshold: float) -> LLMJudge:
        model, params = base
        return LLMJudge(
            model,
            params,
            parts.tokenizer,
            question=question,
            threshold=threshold,
            timeout_s=max(60.0, config.constraints.judge_timeout_s),
        )

    judges = build_judges(config, llm=llm)
    return JudgeMixture(judges, timeout_s=config.constraints.judge_timeout_s)


def use_planned_step(actor: Learner, path: str, mesh) -> None:
    """Has `actor` run the train step saved at `path` (`config.train.planned_step`), loaded
    onto the train mesh's devices in its order.

    Raises:
      ValueError: the executable is missing, was built for other devices or another jax, or
        trains another model than this run's; one line naming the field.
    """
    from jaxrl_llm.sharding.executables import ExecutableMismatchError, load_executable

    field = f"config.train.planned_step={path!r}"
    try:
        executable = load_executable(path, devices=list(mesh.devices.flat))
    except (FileNotFoundError, ExecutableMismatchError) as error:
        raise ValueError(f"{field}: {error}") from None
    actor.use_planned_step(executable, source=field)
