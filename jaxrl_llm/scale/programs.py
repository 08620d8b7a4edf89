"""Every phase of an RL step as a lowered program, from shapes alone, with the roles' own code.

Each builder takes a `Workload` and a mesh (of real devices, or of a TPU topology's devices from
`jaxrl_llm.scale.topology`) and returns a `Program`: the `jax.stages.Lowered` of the function the
runners call, over `jax.ShapeDtypeStruct`s laid out as the role lays out its arrays:

  actor_train     `roles.learner.learner_program(...).step`: the algorithm's loss, the run's
                  optimizer (AdamW state), remat, LoRA, packing; one minibatch
  rollout         `Generator.lower`: prefill, the compacting decode loop, the KV cache of the
                  whole batch, in the decode layout (`RolloutWorker`'s generator)
  reference       `roles.reference.logprob_fn`: frozen log-probs of a chunk of rollout rows
  critic_values   `roles.critic.value_fn` over a chunk of rows
  critic_train    the critic's `learner_program` step on one minibatch
  reward_model    `roles.reward.score_fn` over a chunk of rows

(the weight sync's programs are in `jaxrl_llm.scale.weight_sync`). The forwards take `rows`, the
chunk `config.rollout.forward_batch` gives them (`jaxrl_llm.roles.forwards`; default every row
of the step); `Program.runs` counts the chunks of a step.

Programs are traced under the role's `use_layout`, as the roles trace them. Nothing here runs a
program; `jaxrl_llm.scale.analysis` compiles them and reads the compiler's figures.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_llm.algorithms import registry
from jaxrl_llm.algorithms.base import Experience
from jaxrl_llm.algorithms.batch import pack_batch, split_minibatches
from jaxrl_llm.algorithms.collected import server_of
from jaxrl_llm.config import lora_config_of
from jaxrl_llm.models import partitioning
from jaxrl_llm.models.heads import ScalarHeadModel
from jaxrl_llm.models.lora import add_adapters, strip_adapters
from jaxrl_llm.models.partitioning import use_layout
from jaxrl_llm.models.precision import compute_params
from jaxrl_llm.models.transformer import Transformer
from jaxrl_llm.roles.critic import value_fn
from jaxrl_llm.roles.learner import learner_program, row_sharding
from jaxrl_llm.roles.reference import logprob_fn
from jaxrl_llm.roles.reward import score_fn
from jaxrl_llm.rollout import CacheLayout, GenerationConfig, Generator
from jaxrl_llm.rollout.types import FinishReason, Rollout
from jaxrl_llm.runners.components import build_optimizer, total_updates
from jaxrl_llm.runners.stabilisers import StepStabilisers
from jaxrl_llm.scale.workload import Workload
from jaxrl_llm.sharding import (
    DECODE_RULES,
    TRAIN_RULES,
    layout,
    param_shardings,
)


class Program(NamedTuple):
    """A phase's lowered program.

    Attributes:
      phase: "actor_train", "rollout", "reference", "critic_values", "critic_train",
        "reward_model", or a step of the weight sync ("reshard_cast", "reshard",
        "reshard_send", "reshard_receive": `jaxrl_llm.scale.weight_sync`).
      lowered: the `jax.stages.Lowered`.
      mesh: the mesh it runs on.
      runs: executions per RL step (the train step runs once per minibatch).
      key: what identifies the program for the compile cache (phase, shapes, options).
      state_bytes: bytes per device of the arrays the role keeps between phases (the actor's
        parameters and optimizer state, the reference's or the decode copy's weights).
    """

    phase: str
    lowered: Any
    mesh: Mesh
    runs: int
    key: str
    state_bytes: float = 0.0


def _is_variable(x) -> bool:
    return isinstance(x, nnx.Variable)


def abstract_arrays(state, shardings) -> Any:
    """`jax.ShapeDtypeStruct`s with shardings for every leaf of an (abstract) state."""

    def one(leaf, sharding):
        value = leaf.get_value() if _is_variable(leaf) else leaf
        abstract = jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)
        return leaf.replace(abstract) if _is_variable(leaf) else abstract

    return jax.tree.map(one, state, shardings, is_leaf=_is_variable)


def device_bytes_of(tree) -> float:
    """Bytes per device of a tree of `jax.ShapeDtypeStruct`s with shardings (the largest
    shard of each array, i.e. what the most loaded device holds)."""
    leaves = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))
    return float(
        sum(np.prod(x.sharding.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)
    )


def abstract_policy(workload: Workload) -> Transformer:
    """The policy with no weights (`nnx.eval_shape`), with LoRA adapters when configured."""
    lora = lora_config_of(workload.config)

    def build():
        model = Transformer(workload.model, rngs=nnx.Rngs(params=0))
        return model if lora is None else add_adapters(model, lora, seed=0)

    return nnx.eval_shape(build)


# Config fields no program reads: the run's length, seeds, data and logging, and the chunks
# (the builders take a chunk's rows as an argument, and it enters the key as such). Every other
# field is in a program's cache key, so a change anywhere else (rollout.compaction, the
# optimizer's rate, a loss term ...) compiles anew; a field wrongly kept costs a compile, never
# a wrong plan.
UNTRACED_FIELDS = (
    "seed", "train.checkpoint_every", "train.keep_checkpoints", "train.sample_every",
    "train.max_time_s", "train.max_consecutive_nonfinite", "train.planned_step", "eval", "task",
    "placement",
    "rollout.decode_batch", "rollout.forward_batch",
)  # fmt: skip


def traced_config(config) -> dict:
    """`config` as a flat {dotted key: value} without `UNTRACED_FIELDS` (placement enters a
    key as the mesh itself)."""
    flat = {}

    def walk(tree, prefix):
        for key, value in tree.items():
            name = f"{prefix}{key}"
            if any(name == f or name.startswith(f + ".") for f in UNTRACED_FIELDS):
                continue
            if hasattr(value, "items"):
                walk(value, name + ".")
            else:
                flat[name] = value

    walk(config, "")
    return flat


def program_key(workload: Workload, phase: str, mesh: Mesh, **extra) -> str:
    """What identifies a program for the compile cache: its phase, the model, every traced
    config field, the step's shapes, the mesh and its devices, and `extra` (a chunk's rows, an
    array's layouts)."""
    fields = dict(
        phase=phase,
        model=repr(workload.model),
        config=repr(sorted(traced_config(workload.config).items())),
        shapes=(workload.sequences, workload.prompt_len, workload.response_len,
                workload.num_minibatches),
        mesh=tuple(mesh.shape.items()),
        devices=tuple(d.id for d in mesh.devices.flat),
        kind=mesh.devices.flat[0].device_kind,
        layout_kernels=partitioning.layout_kernels_enabled(),
        **extra,
    )  # fmt: skip
    return repr(sorted(fields.items()))


def synthetic_rollout(workload: Workload) -> Rollout:
    """A host `Rollout` of the step's shape: every prompt `prompt_len` tokens, every completion
    `response_len` tokens (the longest a step can be)."""
    b, p, t = workload.sequences, workload.prompt_len, workload.length
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, workload.model.vocab_size, size=(b, t)).astype(np.int32)
    mask = np.zeros((b, t), bool)
    mask[:, p:] = True
    logprobs = np.where(mask, -1.0, 0.0).astype(np.float32)
    return Rollout(
        tokens=tokens,
        completion_mask=mask,
        logprobs=logprobs,
        raw_logprobs=logprobs,
        prompt_lengths=np.full((b,), p, np.int32),
        lengths=np.full((b,), workload.response_len, np.int32),
        finish_reason=np.full((b,), int(FinishReason.LENGTH), np.int32),
    )


def minibatch_of(workload: Workload, algorithm) -> Any:
    """The first minibatch the runner would train on (host arrays), built by the algorithm's
    own `make_batch`, packed and split as `OnlineRun.process` / `update` do."""
    for request in algorithm.collects:  # no examples or tokenizer here to serve them from
        field = server_of(type(request))
        if field is not None:
            raise ValueError(
                f"the planner cannot make algorithm {algorithm.name!r}'s collected field "
                f"{field.name!r} ({request!r}) from its synthetic batch: plan a built-in "
                "algorithm of the same shapes (e.g. config.algorithm='grpo') instead."
            )
    rollout = synthetic_rollout(workload)
    b, t = rollout.tokens.shape
    experience = Experience(
        rollout=rollout,
        rewards=np.linspace(0.0, 1.0, b).astype(np.float32),
        group_size=workload.group_size,
        ref_logp=np.zeros((b, t), np.float32) if algorithm.needs("reference") else None,
        values=np.zeros((b, t), np.float32) if algorithm.needs("critic") else None,
        baseline_rewards=np.zeros((b,), np.float32) if algorithm.baseline_rollout else None,
        sources=("task",) * b,
    )
    batch, _ = algorithm.make_batch(experience, algorithm.init())
    c = workload.config
    # the per-row entropy weight and Clip-Cov's draws, when configured, as the runner adds them
    if c.get("stabilise") is not None:
        batch = StepStabilisers(c, pad_id=0, meta={}).prepare(batch)
    if batch.rollout_logp is None:
        batch = batch._replace(rollout_logp=jnp.asarray(rollout.logprobs, jnp.float32))
    if c.train.pack_sequences:
        batch, _ = pack_batch(
            batch,
            np.asarray(rollout.sequence_lengths),
            row_multiple=c.train.num_minibatches * c.train.pack_row_multiple,
            width=max(c.train.pack_width, t),
        )
    return split_minibatches(batch, c.train.num_minibatches)[0]


def _abstract_batch(batch, mesh: Mesh) -> Any:
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=row_sharding(x.shape, mesh)),
        batch,
    )


def _lower_train(program, optimizer, params, frozen, batch, mesh: Mesh):
    step = jax.ShapeDtypeStruct((), jnp.int32, sharding=program.state_shardings.step)
    abs_params = abstract_arrays(params, program.state_shardings.params)
    opt_state = abstract_arrays(
        jax.eval_shape(optimizer.init, abs_params), program.state_shardings.opt_state
    )
    state = type(program.state_shardings)(step, abs_params, opt_state)
    args = (state, _abstract_batch(batch, mesh))
    if frozen is not None:
        args += (abstract_arrays(frozen, program.frozen_shardings),)
    with use_layout(layout(mesh, TRAIN_RULES)):
        lowered = program.step.lower(*args)
    return lowered, device_bytes_of((state, args[2:]))


def actor_train_program(workload: Workload, mesh: Mesh) -> Program:
    """The actor's train step on one minibatch (see the module docstring)."""
    c = workload.config
    algorithm = registry.make(c)
    optimizer = build_optimizer(c.optimizer, total_updates(c))
    program, params, frozen = learner_program(
        abstract_policy(workload), optimizer, algorithm.loss, mesh, TRAIN_RULES
    )
    batch = minibatch_of(workload, algorithm)
    lowered, state_bytes = _lower_train(program, optimizer, params, frozen, batch, mesh)
    return Program("actor_train", lowered, mesh, workload.num_minibatches,
                   program_key(workload, "actor_train", mesh), state_bytes=state_bytes)  # fmt: skip


def _critic_learner(workload: Workload, mesh: Mesh):
    """(the critic's `LearnerProgram`, its abstract parameters, optimizer, algorithm)."""
    c = workload.config
    algorithm = registry.make(c)
    trunk = strip_adapters(abstract_policy(workload)) if workload.lora else None

    def build():
        policy = trunk or Transformer(workload.model, rngs=nnx.Rngs(params=0))
        return ScalarHeadModel.from_policy(policy, seed=0)

    critic = nnx.eval_shape(build)
    optimizer = build_optimizer(c.critic, total_updates(c), "config.critic")
    program, params, _ = learner_program(critic, optimizer, algorithm.critic_loss, mesh)
    return program, params, optimizer, algorithm


def critic_train_program(workload: Workload, mesh: Mesh) -> Program:
    """The critic's train step on one minibatch."""
    program, params, optimizer, algorithm = _critic_learner(workload, mesh)
    batch = minibatch_of(workload, algorithm)
    train, state_bytes = _lower_train(program, optimizer, params, None, batch, mesh)
    return Program("critic_train", train, mesh, workload.num_minibatches,
                   program_key(workload, "critic_train", mesh), state_bytes=state_bytes)  # fmt: skip


def critic_values_program(workload: Workload, mesh: Mesh, *, rows: int | None = None) -> Program:
    """The critic's value forward over a chunk of `rows` rollout rows (default all); its
    weights are counted with the critic's train state."""
    program, params, _, _ = _critic_learner(workload, mesh)
    values = _forward_program(workload, mesh, "critic_values", value_fn(program.graphdef),
                              params, rows=rows, with_lengths=False)  # fmt: skip
    return values._replace(state_bytes=0.0)


def _forward_program(workload, mesh, phase, fn, params, *, rows, with_lengths: bool) -> Program:
    rows = min(rows or workload.sequences, workload.sequences)
    shardings = param_shardings(params, mesh, TRAIN_RULES)
    shape = (rows, workload.length)
    tokens = jax.ShapeDtypeStruct(shape, jnp.int32, sharding=row_sharding(shape, mesh))
    args = (abstract_arrays(params, shardings), tokens)
    if with_lengths:
        args += (jax.ShapeDtypeStruct((rows,), jnp.int32, sharding=row_sharding((rows,), mesh)),)
    with use_layout(layout(mesh, TRAIN_RULES)):
        lowered = fn.lower(*args)
    chunks = -(-workload.sequences // rows)
    return Program(phase, lowered, mesh, chunks, program_key(workload, phase, mesh, rows=rows),
                   state_bytes=device_bytes_of(args[0]))  # fmt: skip


def reference_program(workload: Workload, mesh: Mesh, *, rows: int | None = None) -> Program:
    """Frozen log-probs of a chunk of `rows` rollout rows (default all; the reference role,
    train layout)."""
    model = strip_adapters(abstract_policy(workload))
    graphdef, params = nnx.split(model, nnx.Param)
    params = compute_params(model, params)  # frozen: kept in the compute dtype
    fn = logprob_fn(graphdef, temperature=workload.config.rollout.temperature)
    return _forward_program(workload, mesh, "reference", fn, params, rows=rows,
                            with_lengths=False)  # fmt: skip


def reward_model_program(workload: Workload, mesh: Mesh, *, rows: int | None = None) -> Program:
    """A reward model of the policy's architecture scoring a chunk of `rows` rollout rows
    (default all)."""
    model = nnx.eval_shape(
        lambda: ScalarHeadModel(Transformer(workload.model, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(0))
    )
    graphdef, params = nnx.split(model, nnx.Param)
    params = compute_params(model, params)  # frozen: kept in the compute dtype
    return _forward_program(workload, mesh, "reward_model", score_fn(graphdef), params,
                            rows=rows, with_lengths=True)  # fmt: skip


def _decode_model(workload: Workload) -> Transformer:
    policy = abstract_policy(workload)
    if workload.lora and workload.config.model.lora.rollout == "merge":
        return strip_adapters(policy)
    return policy


def rollout_generation_config(workload: Workload) -> GenerationConfig:
    """The `GenerationConfig` of the rollout's decode program, from the run config."""
    c, eos = workload.config, workload.model.eos_token_id
    return GenerationConfig(
        max_new_tokens=workload.response_len,
        temperature=c.rollout.temperature,
        eos_ids=() if eos is None else (eos,),
        min_prompt_bucket=workload.prompt_len,
        compaction=c.rollout.compaction,
        prefix_sharing=c.rollout.prefix_sharing,
        decode_attention=c.rollout.get("decode_attention", "auto"),
    )


def rollout_program(workload: Workload, mesh: Mesh, *, rows: int | None = None) -> Program:
    """The rollout's decode program (decode layout on `mesh`) for one chunk of `rows` rows
    (`config.rollout.decode_batch`; default every row of the step); `Program.runs` counts the
    chunks of a step."""
    model = _decode_model(workload)
    generator = Generator(
        model, rollout_generation_config(workload), cache_shardings=CacheLayout(mesh, DECODE_RULES)
    )
    rows = workload.sequences if not rows else min(rows, workload.sequences)
    rng = np.random.default_rng(0)
    prompts = [
        list(rng.integers(1, workload.model.vocab_size, size=workload.prompt_len))
        for _ in range(workload.num_prompts)
    ]
    group_prompts = [p for p in prompts for _ in range(workload.group_size)][:rows]
    params = compute_params(model, nnx.state(model, nnx.Param))  # the decode copy's dtype
    abs_params = abstract_arrays(params, param_shardings(params, mesh, DECODE_RULES))
    lowered = generator.lower(
        group_prompts, params=abs_params, input_sharding=NamedSharding(mesh, PartitionSpec())
    )
    chunks = -(-workload.sequences // rows)
    key = program_key(workload, "rollout", mesh, rows=rows)
    return Program("rollout", lowered, mesh, chunks, key,
                   state_bytes=device_bytes_of(abs_params))  # fmt: skip
