"""A trained role: a model's train state on its mesh, laid out by a rule set, and its jitted step.

The actor (the policy) and the critic (a value model) are both `Learner`s: each owns its model's
graph, a `TrainState` (parameters, optimizer state, step) placed on its mesh by `TRAIN_RULES`,
its own optimizer and loss, and a jitted, donated train step whose outputs keep that layout (so
the step compiles once per batch shape).

A model with LoRA adapters (`jaxrl_llm.models.lora.add_adapters`) trains its adapters alone:
the train state (and so the optimizer state and every checkpoint) holds only the adapters, and
the base weights stay in `Learner.frozen`, placed once and passed to each step undonated.

Mixed precision (`ModelConfig.param_dtype="float32"`, `dtype="bfloat16"`): the train state, and
so every checkpoint, holds the float32 master weights and float32 Adam moments; the step casts
to bfloat16 inside its program. A LoRA base is frozen, so it is kept in bfloat16.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_llm.models.lora import has_adapters, split_adapters
from jaxrl_llm.models.partitioning import use_layout
from jaxrl_llm.models.precision import compute_params
from jaxrl_llm.sharding import (
    TRAIN_RULES,
    Rules,
    init_optimizer_state,
    layout,
    logical_to_sharding,
    optimizer_state_shardings,
    param_shardings,
    reshard,
)
from jaxrl_llm.training import TrainState, make_train_step
from jaxrl_llm.training.train_step import LossFn


def place_params(params: Any, shardings: Any, *, donate: bool = False) -> Any:
    """`params` laid out by `shardings` (a tree or a prefix of one), moved on device only.

    `reshard` moves what is laid out differently (never through the host); arrays already in
    place keep their buffers and are only relabelled with the named sharding, so a jitted step
    that outputs named shardings sees the same input layout on its first and later calls.
    """
    params, _ = reshard(params, shardings, donate=donate)
    return jax.device_put(params, shardings, may_alias=True)


def row_sharding(shape: tuple[int, ...], mesh: Mesh, rules: Rules = TRAIN_RULES) -> NamedSharding:
    """The sharding of a batch array of `shape`: its leading (row) axis split by the "batch"
    rule, the rest replicated. Rows that do not divide the "data" axis stay replicated (see
    `logical_to_pspec`)."""
    return logical_to_sharding(("batch",) + (None,) * (len(shape) - 1), rules, mesh, shape)


def place_batch(batch: Any, mesh: Mesh, rules: Rules = TRAIN_RULES) -> Any:
    """Every array of `batch` on `mesh`, laid out by `row_sharding`."""

    def one(x):
        x = np.asarray(x) if not isinstance(x, jax.Array) else x
        return jax.device_put(x, row_sharding(x.shape, mesh, rules))

    return jax.tree.map(one, batch)


class LearnerProgram(NamedTuple):
    """What a `Learner` compiles, independent of any weights (so it can be built from an
    abstract model, `nnx.eval_shape`, and compiled ahead of time for other devices).

    Attributes:
      graphdef: the model's graph (the adapters' graph with LoRA).
      state_shardings: `TrainState` of shardings (step, params, optimizer state).
      frozen_shardings: shardings of a LoRA model's frozen base, else None.
      step: the jitted, donated `step(state, batch[, frozen]) -> (state, metrics)`; trace it
        under `use_layout(layout(mesh, rules))`, as `Learner.update` does.
    """

    graphdef: nnx.GraphDef
    state_shardings: TrainState
    frozen_shardings: Any
    step: Any


def learner_program(
    model: nnx.Module,
    optimizer: optax.GradientTransformation,
    loss_fn: LossFn,
    mesh: Mesh,
    rules: Rules = TRAIN_RULES,
    *,
    dropout_seed: int = 0,
) -> tuple[LearnerProgram, nnx.State, nnx.State | None]:
    """The train step of `model` on `mesh` and the model's (trained, frozen) parameter states.

    `model` may be concrete or abstract (`nnx.eval_shape`); only shapes and logical axes are
    read. With LoRA adapters the trained state is the adapters and the frozen one the base. Under
    mixed precision (`ModelConfig.param_dtype`) the trained state is the float32 master copy (so
    is the optimizer state), the step computes in the model's `dtype`, and a LoRA base is
    returned in that compute dtype (`jaxrl_llm.models.precision`).
    """
    frozen = frozen_shardings = None
    if has_adapters(model):
        graphdef, params, frozen = nnx.split(model, nnx.LoRAParam, nnx.Param)
        # The frozen base trains not, so it needs no master copy: kept in the compute dtype.
        frozen = compute_params(model, frozen)
        frozen_shardings = param_shardings(frozen, mesh, rules)
    else:
        graphdef, params = nnx.split(model, nnx.Param)
    shardings = param_shardings(params, mesh, rules)
    replicated = NamedSharding(mesh, PartitionSpec())
    state_shardings = TrainState(
        step=replicated,
        params=shardings,
        opt_state=optimizer_state_shardings(optimizer, params, shardings),
    )
    step = make_train_step(
        graphdef,
        optimizer,
        loss_fn,
        out_shardings=(state_shardings, replicated),
        dropout_seed=dropout_seed,
    )
    return LearnerProgram(graphdef, state_shardings, frozen_shardings, step), params, frozen


class Learner:
    """A model under training on a mesh.

    Args:
      model: an `nnx.Module` whose parameters carry logical axes (a `Transformer`, a
        `ScalarHeadModel`); its arrays are placed (not copied when already laid out) and then
        owned by the train state, whose step donates them.
      optimizer: the optax transformation of this role.
      loss_fn: `(model, batch) -> (loss, metrics)`.
      mesh: the role's mesh.
      rules: the logical-axis rule set of its parameters (default `TRAIN_RULES`).
      dropout_seed: the seed of LoRA dropout masks (see `make_train_step`).

    Attributes:
      frozen: the base weights of a LoRA model (train layout), or None when every parameter
        trains.

    Example:
      >>> actor = Learner(policy, make_optimizer(learning_rate=1e-5), loss, placement.train_mesh)
      >>> metrics = actor.update(batch)
    """

    def __init__(
        self,
        model: nnx.Module,
        optimizer: optax.GradientTransformation,
        loss_fn: LossFn,
        mesh: Mesh,
        rules: Rules = TRAIN_RULES,
        dropout_seed: int = 0,
    ):
        self.mesh, self.rules = mesh, rules
        program, params, frozen = learner_program(
            model, optimizer, loss_fn, mesh, rules, dropout_seed=dropout_seed
        )
        self.program = program
        self.graphdef = program.graphdef
        self.param_shardings = program.state_shardings.params
        self.state_shardings = program.state_shardings
        self.frozen = None
        if frozen is not None:
            self.frozen = place_params(frozen, program.frozen_shardings)
        params = place_params(params, self.param_shardings)
        self._optimizer = optimizer
        self._loss_fn, self._dropout_seed = loss_fn, dropout_seed
        self._accumulating_step = None  # built on the first accumulated update
        self.state = self._fresh_state(params)
        self._step = program.step
        self._planned = None  # a loaded executable of the step (`use_planned_step`)
        self.planned_updates = 0  # updates the planned executable ran
        self.unplanned_shapes: list[tuple] = []  # minibatch shapes it did not cover

    def _fresh_state(self, params) -> TrainState:
        step = jax.device_put(jnp.zeros((), jnp.int32), self.state_shardings.step)
        return TrainState(step, params, init_optimizer_state(self._optimizer, params))

    def reset(self, params: nnx.State) -> None:
        """Restarts training from a copy of `params` (a full state, as `params` returns): step 0
        and a fresh optimizer state (e.g. ReST-EM's M-step, which fine-tunes the base model anew
        each iteration). A LoRA learner takes the adapters of `params`; its base stays."""
        if self.frozen is not None:
            params, _ = split_adapters(params)
        copied = jax.tree.map(jnp.copy, params)  # the train step donates its state
        self.state = self._fresh_state(place_params(copied, self.param_shardings))

    @property
    def params(self) -> nnx.State:
        """The current parameters of the whole model (train layout): with LoRA, the frozen base
        and the trained adapters in one state (shared arrays, no copy)."""
        if self.frozen is None:
            return self.state.params
        return nnx.merge_state(self.frozen, self.state.params)

    def use_planned_step(self, executable, source: str = "the planned step") -> None:
        """Runs `executable` (a `jax.stages.Compiled` of this learner's step, e.g. loaded by
        `sharding.executables.load_executable` from what `python -m jaxrl_llm.plan
        --save_executables` kept) for every minibatch of the shapes it was compiled for, so the
        run executes the program that was planned; a minibatch of other shapes (a longer prompt
        bucket than planned) runs this learner's own jitted step, once logged per shape.

        Raises:
          ValueError: the executable's train state (or LoRA base) is not this learner's: the
            first differing array named, with what to do.
        """
        (state, planned_batch, *frozen), _ = executable.args_info
        mine = (self.state, *([self.frozen] if self.frozen is not None else []))
        theirs = (state, *frozen)
        paths = jax.tree_util.tree_flatten_with_path(mine)[0]
        their_leaves, their_tree = jax.tree.flatten(theirs)
        if their_tree != jax.tree.structure(mine):
            raise ValueError(
                f"{source}: its train state is laid out as another model's or optimizer's "
                f"({len(their_leaves)} arrays against this run's {len(paths)}): plan with this "
                "run's config (python -m jaxrl_llm.plan --config ... --save_executables)."
            )
        for (path, x), y in zip(paths, their_leaves, strict=True):
            if (tuple(x.shape), x.dtype) != (tuple(y.shape), y.dtype):
                raise ValueError(
                    f"{source}: train-state array {jax.tree_util.keystr(path)} is "
                    f"{y.dtype}{list(y.shape)} in the executable and {x.dtype}{list(x.shape)} "
                    "in this run: plan with this run's config (model, precision, optimizer)."
                )
        self._planned = executable
        self._planned_batch = (jax.tree.structure(planned_batch), _shapes_of(planned_batch))

    def _runs_planned(self, batch) -> bool:
        if self._planned is None:
            return False
        shapes = _shapes_of(batch)
        if (jax.tree.structure(batch), shapes) == self._planned_batch:
            return True
        key = tuple(shape for shape, _ in shapes)
        if key not in self.unplanned_shapes:
            self.unplanned_shapes.append(key)
            logging.warning(
                "A minibatch of shapes %s is not the planned step's (%s): its own program is "
                "compiled for it (plan with a larger rollout.min_prompt_bucket to cover it).",
                key,
                tuple(shape for shape, _ in self._planned_batch[1]),
            )
        return False

    def update(self, batch, *, micro_weights=None) -> dict[str, jax.Array]:
        """One optimizer update on `batch` (placed on this role's mesh); returns its metrics.

        Args:
          batch: the minibatch, every array with its rows first.
          micro_weights: float [K] with K > 1: the update accumulates the gradients of K
            contiguous micro-batches of the rows, weighted so (`micro_batch_weights` in
            `jaxrl_llm.algorithms.batch`), one after another (`make_train_step(..., accumulate=True)`:
            the activations of one micro-batch at a time). None (or K = 1): the whole batch at
            once, through the planned executable when there is one.
        """
        batch = place_batch(batch, self.mesh, self.rules)
        frozen = () if self.frozen is None else (self.frozen,)
        if micro_weights is not None and len(micro_weights) > 1:
            replicated = NamedSharding(self.mesh, PartitionSpec())
            weights = jax.device_put(np.asarray(micro_weights, np.float32), replicated)
            with use_layout(layout(self.mesh, self.rules)):
                self.state, metrics = self._accumulating()(self.state, batch, weights, *frozen)
            return metrics
        args = (batch, *frozen)
        if self._runs_planned(batch):
            self.state, metrics = self._planned(self.state, *args)
            self.planned_updates += 1
            return metrics
        with use_layout(layout(self.mesh, self.rules)):  # read while the step is traced
            self.state, metrics = self._step(self.state, *args)
        return metrics

    def _accumulating(self):
        """The jitted accumulating step of this learner (built once, on first use)."""
        if self._accumulating_step is None:
            replicated = NamedSharding(self.mesh, PartitionSpec())
            self._accumulating_step = make_train_step(
                self.graphdef,
                self._optimizer,
                self._loss_fn,
                out_shardings=(self.state_shardings, replicated),
                dropout_seed=self._dropout_seed,
                accumulate=True,
            )
        return self._accumulating_step


def _shapes_of(tree) -> list[tuple[tuple[int, ...], Any]]:
    """(shape, dtype) of each array of `tree` (arrays, `jax.ShapeDtypeStruct`s or the
    `ArgInfo`s of a compiled program's arguments), in tree order."""
    return [(tuple(x.shape), x.dtype) for x in jax.tree.leaves(tree)]
