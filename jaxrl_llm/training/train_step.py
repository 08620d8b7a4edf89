"""A jitted, donated train step over (params, optimizer state) with a non-finite guard.

`make_train_step(graphdef, optimizer, loss_fn)` returns `step(state, batch) -> (state, metrics)`:
`loss_fn(model, batch) -> (loss, metrics)` is any pure loss of a merged model (GRPO's, DPO's ...).
With LoRA (`jaxrl_llm.models.lora`) the state holds only the adapters and the step takes the
frozen base weights as a third argument: `step(state, batch, frozen)`; gradients and optimizer
state exist for the adapters alone.
Under mixed precision (`ModelConfig.param_dtype="float32"` with a bfloat16 `dtype`) the state
holds the float32 master weights and float32 optimizer state, and the step casts the weights to
bfloat16 as it starts (`jaxrl_llm.models.precision`); updates are applied in float32.
A step whose loss or gradients are not finite leaves parameters and optimizer state unchanged and
reports `metrics["nonfinite"] = 1`; the runner counts those and stops after K in a row.

`make_train_step(..., accumulate=True)` makes one update from K micro-batches of a batch (gradient
accumulation): the micro-batches run one after another in a `lax.scan`, so only one holds
activations at a time, and their weighted gradients add up to the whole batch's (see its
docstring for the weights that make that exact).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxrl_llm.models.lora import dropout_key
from jaxrl_llm.models.precision import merge_for_compute

Array = jax.Array
LossFn = Callable[[Any, Any], tuple[Array, dict[str, Array]]]


class TrainState(NamedTuple):
    """Everything that changes during training, as a pytree.

    Attributes:
      step: int32 [] number of optimizer updates applied.
      params: `nnx.State` of the model's parameters.
      opt_state: the optax state.
    """

    step: Array
    params: nnx.State
    opt_state: optax.OptState


def create_train_state(
    model, optimizer: optax.GradientTransformation
) -> tuple[nnx.GraphDef, TrainState]:
    """Splits `model` into its static graph and a `TrainState` with a fresh optimizer state."""
    graphdef, params = nnx.split(model, nnx.Param)
    opt_state = jax.jit(optimizer.init)(params)
    return graphdef, TrainState(jnp.zeros((), jnp.int32), params, opt_state)


def make_train_step(
    graphdef: nnx.GraphDef,
    optimizer: optax.GradientTransformation,
    loss_fn: LossFn,
    *,
    donate: bool = True,
    out_shardings: Any = None,
    dropout_seed: int = 0,
    accumulate: bool = False,
) -> Callable[..., tuple[TrainState, dict[str, Array]]]:
    """Builds the jitted update `step(state, batch) -> (state, metrics)`.

    With `accumulate`, the update `step(state, batch, weights_k, frozen=None)` accumulates the
    gradients of K micro-batches (gradient accumulation). Every array of the batch has its M
    rows first; they are cut into K contiguous micro-batches of M / K rows (K the length of
    `weights_k`, which must divide M; the cut of `split_minibatches`), run one after another
    in a `lax.scan`, and micro-batch k's loss, gradient and metrics weighted by `weights_k[k]`:

        g = sum_k w_k grad L_k,        L = sum_k w_k L_k,        metrics = sum_k w_k metrics_k

    When each L_k is a ratio total_k / count_k whose count does not depend on the parameters
    (every `jaxrl_llm.losses.aggregate` mode) and w_k = count_k / sum_j count_j, w_k L_k =
    total_k / sum_j count_j: L and g are exactly the whole batch's loss and gradient (the
    token-mean over all tokens, not a mean of per-micro-batch means; `micro_batch_weights` in
    `jaxrl_llm.algorithms.batch` computes those w). Token-mean metrics are then exact too,
    others weighted averages. LoRA dropout draws micro-batch k's masks from fold_in(the
    update's key, k).

    Args:
      graphdef: the model's static graph from `create_train_state`.
      optimizer: the optax transformation whose state `state.opt_state` holds.
      loss_fn: `(model, batch) -> (scalar loss, dict of scalar metrics)`, pure.
      donate: donate the incoming state's buffers (the caller must not reuse it).
      out_shardings: optional `(state shardings, metrics sharding)` for `jax.jit`, so the new
        state keeps the layout of the old one on a mesh (one compiled step per batch shape).
      dropout_seed: LoRA adapters with dropout draw their masks from
        fold_in(key(dropout_seed), state.step): another mask each update, the same on a resume.
      accumulate: build the accumulating step (float32 [K] `weights_k` after the batch).

    Returns:
      The jitted `step(state, batch, frozen=None)` (with `accumulate`, `step(state, batch,
      weights_k, frozen=None)`); `frozen` is the `nnx.State` of parameters that do not train (a
      LoRA model's base weights), merged with `state.params` and never donated. Metrics gain
      "loss", "grad_norm", "nonfinite" (0/1) and "learning_step".
    """

    def step(state: TrainState, batch, frozen=None) -> tuple[TrainState, dict[str, Array]]:
        key = jax.random.fold_in(jax.random.key(dropout_seed), state.step)
        loss_and_grad = _loss_and_grad(graphdef, loss_fn, frozen)
        (loss, metrics), grads = loss_and_grad(state.params, batch, key)
        return _apply_update(optimizer, state, grads, loss, metrics)

    def accumulating_step(state: TrainState, batch, weights_k, frozen=None):
        num_micro = weights_k.shape[0]
        weights_k = weights_k.astype(jnp.float32)
        key = jax.random.fold_in(jax.random.key(dropout_seed), state.step)
        loss_and_grad = _loss_and_grad(graphdef, loss_fn, frozen)
        micro_kb = jax.tree.map(lambda x: x.reshape(num_micro, -1, *x.shape[1:]), batch)

        def one_micro(grads_sum, inputs):
            micro, weight, index = inputs
            (loss, metrics), grads = loss_and_grad(
                state.params, micro, jax.random.fold_in(key, index)
            )
            grads_sum = jax.tree.map(lambda total, g: total + weight * g, grads_sum, grads)
            return grads_sum, (loss, metrics)

        zeros = jax.tree.map(jnp.zeros_like, state.params)
        inputs = (micro_kb, weights_k, jnp.arange(num_micro))
        grads, (loss_k, metrics_k) = jax.lax.scan(one_micro, zeros, inputs)
        weighted = lambda x: jnp.tensordot(weights_k, x.astype(jnp.float32), axes=1)
        loss, metrics = weighted(loss_k), jax.tree.map(weighted, metrics_k)
        return _apply_update(optimizer, state, grads, loss, metrics)

    step_fn = accumulating_step if accumulate else step
    donate_argnums = (0,) if donate else ()
    if out_shardings is None:
        return jax.jit(step_fn, donate_argnums=donate_argnums)
    return jax.jit(step_fn, donate_argnums=donate_argnums, out_shardings=out_shardings)


def _loss_and_grad(graphdef, loss_fn: LossFn, frozen):
    """`(params, batch, key) -> ((loss, metrics), grads)` of `loss_fn` on the merged model."""

    def loss_of_params(params, batch, key):
        # Mixed precision: the float32 master weights are cast to the compute dtype here,
        # inside the differentiated function, so their gradients are float32.
        model = merge_for_compute(graphdef, params, *(() if frozen is None else (frozen,)))
        with dropout_key(key):
            return loss_fn(model, batch)

    return jax.value_and_grad(loss_of_params, has_aux=True)


def _apply_update(optimizer, state: TrainState, grads, loss, metrics):
    """The optimizer update of `state` by `grads`, skipped when the loss or the gradients are
    not finite; the metrics gain "loss", "grad_norm", "nonfinite" and "learning_step"."""
    # One reduction instead of one per leaf (hundreds of leaves made a fusion whose compile
    # took a minute): a NaN or infinite element makes the float32 global norm non-finite.
    # So does a finite gradient above ~1e19, which is divergence too.
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, new_opt_state = optimizer.update(grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)
    new_state = TrainState(
        step=state.step + finite.astype(jnp.int32),
        params=keep(new_params, state.params),
        opt_state=keep(new_opt_state, state.opt_state),
    )
    metrics = dict(metrics)
    metrics.update(
        loss=loss,
        grad_norm=grad_norm,
        nonfinite=(~finite).astype(jnp.float32),
        learning_step=new_state.step.astype(jnp.float32),
    )
    return new_state, metrics
