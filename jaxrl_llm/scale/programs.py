"""Every phase of an RL step as a lowered program, from shapes alone, with the roles' own code.

Each builder takes a `Workload` and a mesh (of real devices, or of a TPU topology's devices from
`jaxrl_llm.scale.topology`) and returns a `Program`: the `jax.stages.Lowered` of the function the
runners call, over `jax.ShapeDtypeStruct`s laid out as the role lays out its arrays:

  actor_train     `roles.learner.learner_program(...).step`: the algorithm's loss, the run's
                  optimizer (AdamW state), remat, LoRA, packing; one minibatch
  rollout         `Generator.lower`: prefill, the compacting decode loop, the KV cache of the
                  whole batch, in the decode layout (`RolloutWorker`'s generator)
  reference       `roles.reference.logprob_fn`: frozen log-probs of every rollout row
  critic_values   `roles.critic.value_fn`; critic_train: the critic's `learner_program` step
  reward_model    `roles.reward.score_fn` over every rollout row
  reshard         the jitted identities `reshard` compiles for a train -> decode move on the
                  same devices (one per distinct array layout), or for split groups the
                  transport layout on the train devices (the copy between groups is not a
                  program: `transfer_bytes` counts it)

Programs are traced under the role's `use_layout`, as the roles trace them. Nothing here runs a
program; `jaxrl_llm.scale.analysis` compiles them and reads the compiler's figures.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_llm.algorithms import registry
from jaxrl_llm.algorithms.base import Experience
from jaxrl_llm.algorithms.batch import pack_batch, split_minibatches
from jaxrl_llm.config import lora_config_of
from jaxrl_llm.models import partitioning
from jaxrl_llm.models.heads import ScalarHeadModel
from jaxrl_llm.models.lora import add_adapters, strip_adapters
from jaxrl_llm.models.partitioning import use_layout
from jaxrl_llm.models.transformer import Transformer
from jaxrl_llm.roles.critic import value_fn
from jaxrl_llm.roles.learner import learner_program, row_sharding
from jaxrl_llm.roles.reference import logprob_fn
from jaxrl_llm.roles.reward import score_fn
from jaxrl_llm.rollout import CacheLayout, GenerationConfig, Generator
from jaxrl_llm.rollout.types import FinishReason, Rollout
from jaxrl_llm.runners.components import build_optimizer, total_updates
from jaxrl_llm.scale.workload import Workload
from jaxrl_llm.sharding import (
    DECODE_RULES,
    TRAIN_RULES,
    layout,
    param_shardings,
)
from jaxrl_llm.sharding.resharding import _transport  # the route `reshard` takes


class Program(NamedTuple):
    """A phase's lowered program.

    Attributes:
      phase: "actor_train", "rollout", "reference", "critic_values", "critic_train",
        "reward_model" or "reshard".
      lowered: the `jax.stages.Lowered`.
      mesh: the mesh it runs on.
      runs: executions per RL step (the train step runs once per minibatch).
      key: what identifies the program for the compile cache (phase, shapes, options).
      transfer_bytes: for a split reshard, bytes each destination device receives from the
        other group (0 otherwise).
      state_bytes: bytes per device of the arrays the role keeps between phases (the actor's
        parameters and optimizer state, the reference's or the decode copy's weights).
    """

    phase: str
    lowered: Any
    mesh: Mesh
    runs: int
    key: str
    transfer_bytes: float = 0.0
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


# Config fields no program reads: the run's length, seeds, data and logging. Every other field
# is in a program's cache key, so a change anywhere else (rollout.compaction, the optimizer's
# rate, a loss term ...) compiles anew; a field wrongly kept costs a compile, never a wrong plan.
UNTRACED_FIELDS = (
    "seed", "train.checkpoint_every", "train.sample_every",
    "train.max_time_s", "train.max_consecutive_nonfinite", "eval", "task", "placement",
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


def _key(workload: Workload, phase: str, mesh: Mesh, **extra) -> str:
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
    if batch.rollout_logp is None:
        batch = batch._replace(rollout_logp=jnp.asarray(rollout.logprobs, jnp.float32))
    c = workload.config
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
                   _key(workload, "actor_train", mesh), state_bytes=state_bytes)  # fmt: skip


def critic_programs(workload: Workload, mesh: Mesh) -> list[Program]:
    """The critic's value forward over every rollout row and its train step on a minibatch."""
    c = workload.config
    algorithm = registry.make(c)
    trunk = strip_adapters(abstract_policy(workload)) if workload.lora else None

    def build():
        policy = trunk or Transformer(workload.model, rngs=nnx.Rngs(params=0))
        return ScalarHeadModel.from_policy(policy, seed=0)

    critic = nnx.eval_shape(build)
    optimizer = build_optimizer(c.critic, total_updates(c))
    program, params, _ = learner_program(critic, optimizer, algorithm.critic_loss, mesh)
    batch = minibatch_of(workload, algorithm)
    train, state_bytes = _lower_train(program, optimizer, params, None, batch, mesh)
    values = _forward_program(workload, mesh, "critic_values", value_fn(program.graphdef),
                              params, with_lengths=False)  # fmt: skip
    return [
        values._replace(state_bytes=0.0),  # the critic's weights are counted with its state
        Program("critic_train", train, mesh, workload.num_minibatches,
                _key(workload, "critic_train", mesh), state_bytes=state_bytes),
    ]  # fmt: skip


def _forward_program(workload, mesh, phase, fn, params, *, with_lengths: bool) -> Program:
    shardings = param_shardings(params, mesh, TRAIN_RULES)
    shape = (workload.sequences, workload.length)
    tokens = jax.ShapeDtypeStruct(shape, jnp.int32, sharding=row_sharding(shape, mesh))
    args = (abstract_arrays(params, shardings), tokens)
    if with_lengths:
        lengths = (workload.sequences,)
        args += (jax.ShapeDtypeStruct(lengths, jnp.int32, sharding=row_sharding(lengths, mesh)),)
    with use_layout(layout(mesh, TRAIN_RULES)):
        lowered = fn.lower(*args)
    return Program(phase, lowered, mesh, 1, _key(workload, phase, mesh),
                   state_bytes=device_bytes_of(args[0]))  # fmt: skip


def reference_program(workload: Workload, mesh: Mesh) -> Program:
    """Frozen log-probs of every rollout row (the reference role, train layout)."""
    graphdef, params = nnx.split(strip_adapters(abstract_policy(workload)), nnx.Param)
    fn = logprob_fn(graphdef, temperature=workload.config.rollout.temperature)
    return _forward_program(workload, mesh, "reference", fn, params, with_lengths=False)


def reward_model_program(workload: Workload, mesh: Mesh) -> Program:
    """A reward model of the policy's architecture scoring every rollout row."""
    model = nnx.eval_shape(
        lambda: ScalarHeadModel(Transformer(workload.model, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(0))
    )
    graphdef, params = nnx.split(model, nnx.Param)
    return _forward_program(workload, mesh, "reward_model", score_fn(graphdef), params,
                            with_lengths=True)  # fmt: skip


def _decode_model(workload: Workload) -> Transformer:
    policy = abstract_policy(workload)
    if workload.lora and workload.config.model.lora.rollout == "merge":
        return strip_adapters(policy)
    return policy


def rollout_program(workload: Workload, mesh: Mesh, *, rows: int | None = None) -> Program:
    """The rollout's decode program (decode layout on `mesh`) for one chunk of `rows` rows
    (`config.rollout.decode_batch`; default every row of the step); `Program.runs` counts the
    chunks of a step."""
    c = workload.config
    model = _decode_model(workload)
    eos = workload.model.eos_token_id
    generation = GenerationConfig(
        max_new_tokens=workload.response_len,
        temperature=c.rollout.temperature,
        eos_ids=() if eos is None else (eos,),
        min_prompt_bucket=workload.prompt_len,
        compaction=c.rollout.compaction,
        prefix_sharing=c.rollout.prefix_sharing,
    )
    generator = Generator(model, generation, cache_shardings=CacheLayout(mesh, DECODE_RULES))
    rows = workload.sequences if not rows else min(rows, workload.sequences)
    rng = np.random.default_rng(0)
    prompts = [
        list(rng.integers(1, workload.model.vocab_size, size=workload.prompt_len))
        for _ in range(workload.num_prompts)
    ]
    group_prompts = [p for p in prompts for _ in range(workload.group_size)][:rows]
    params = nnx.state(model, nnx.Param)
    abs_params = abstract_arrays(params, param_shardings(params, mesh, DECODE_RULES))
    lowered = generator.lower(
        group_prompts, params=abs_params, input_sharding=NamedSharding(mesh, PartitionSpec())
    )
    chunks = -(-workload.sequences // rows)
    return Program("rollout", lowered, mesh, chunks, _key(workload, "rollout", mesh, rows=rows),
                   state_bytes=device_bytes_of(abs_params))  # fmt: skip


def reshard_programs(workload: Workload, train_mesh: Mesh, rollout_mesh: Mesh) -> list[Program]:
    """What `RolloutWorker.sync` compiles for the train -> decode move of the actor's weights
    (every weight; with LoRA the base moves once and only the adapters each step).

    Same device set: one jitted identity per distinct (shape, dtype, source, destination)
    layout, as `reshard` caches them (`Program.runs` counts the arrays sharing it). Different
    device sets: the jitted move to the transport layout on the train devices, and the
    device-to-device copy's bytes per destination device (`Program.transfer_bytes`).
    """
    policy = _decode_model(workload)
    params = nnx.state(policy, nnx.Param)
    if workload.lora:
        from jaxrl_llm.models.lora import split_adapters

        params, _ = split_adapters(params)
    src = jax.tree.leaves(param_shardings(params, train_mesh, TRAIN_RULES),
                          is_leaf=lambda s: isinstance(s, NamedSharding))  # fmt: skip
    dst = jax.tree.leaves(param_shardings(params, rollout_mesh, DECODE_RULES),
                          is_leaf=lambda s: isinstance(s, NamedSharding))  # fmt: skip
    leaves = jax.tree.leaves(params, is_leaf=_is_variable)
    same_devices = tuple(train_mesh.devices.flat) == tuple(rollout_mesh.devices.flat)
    groups: dict[tuple, list] = collections.defaultdict(list)
    for leaf, s, d in zip(leaves, src, dst, strict=True):
        value = leaf.get_value()
        x = jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=s)
        if same_devices and s.is_equivalent_to(d, value.ndim):
            continue  # already laid out: `reshard` returns it as it is
        groups[(value.shape, str(value.dtype), s.spec, d.spec)].append((x, d))
    programs = []
    for (shape, dtype, s_spec, d_spec), members in groups.items():
        x, d = members[0]
        transfer = 0.0
        if same_devices:
            target = d
        else:
            target, t_dst = _transport(x, d)
            # Each destination device receives one transport block per array.
            transfer = float(np.prod(t_dst.shard_shape(shape))) * np.dtype(dtype).itemsize
        lowered = jax.jit(lambda a: a, out_shardings=target).lower(x)
        key = _key(workload, "reshard", train_mesh, shape=shape, dtype=dtype, src=str(s_spec),
                   dst=str(d_spec), to=tuple(dd.id for dd in rollout_mesh.devices.flat))  # fmt: skip
        programs.append(
            Program("reshard", lowered, train_mesh, len(members), key, transfer * len(members))
        )
    return programs
