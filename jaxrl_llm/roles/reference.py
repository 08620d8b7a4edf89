"""The reference role: frozen log-probs of the initial policy, for KL penalties.

With LoRA the initial policy is the base model with its adapters off, and its weights are the
ones the actor keeps frozen: `Reference.of_lora_base` reads the actor's base state in place (no
second copy of the weights), through the graph of the model without adapters.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from jaxrl_llm.models.lora import strip_adapters
from jaxrl_llm.models.partitioning import use_layout
from jaxrl_llm.models.precision import frozen_copy, merge_for_compute
from jaxrl_llm.roles.forwards import in_row_chunks
from jaxrl_llm.roles.learner import Learner, place_batch, place_params
from jaxrl_llm.sharding import TRAIN_RULES, Rules, layout, param_shardings
from jaxrl_llm.training import sequence_logprobs


def logprob_fn(graphdef, *, temperature: float):
    """A jitted `(params, tokens_bt) -> logp_bt` of a model graph: float32 [B, T] log-probs of
    int32 [B, T] sequences (the `Rollout` layout) at the rollout temperature."""

    def logprobs(params, tokens_bt):
        model = merge_for_compute(graphdef, params)
        logp_bt, _ = sequence_logprobs(model, tokens_bt, temperature=temperature)
        return logp_bt

    return jax.jit(logprobs)


class Reference:
    """A frozen copy of a policy's parameters on a mesh, and its jitted log-prob forward.

    Args:
      model: the policy at the start of training; its parameters are copied, so later updates
        (and donation) of the policy leave the reference intact. Under mixed precision the copy
        is in the compute dtype (`jaxrl_llm.models.precision.frozen_copy`).
      mesh: where the copy lives (the train mesh).
      temperature: the rollout temperature (log-probs are of logits / temperature).
      rules: the layout of the copy (default `TRAIN_RULES`).
      forward_batch: rows per forward (`config.rollout.forward_batch`, `roles.forwards`);
        0: every row of a call at once.

    Example:
      >>> ref = Reference(policy, placement.train_mesh, temperature=0.7)
      >>> ref_logp_bt = ref.logprobs(rollout.tokens)       # numpy [B, T]
    """

    def __init__(
        self,
        model: nnx.Module,
        mesh: Mesh,
        *,
        temperature: float,
        rules: Rules = TRAIN_RULES,
        forward_batch: int = 0,
    ):
        self.mesh, self.rules, self.forward_batch = mesh, rules, forward_batch
        self.graphdef, params = nnx.split(model, nnx.Param)
        params = frozen_copy(model, params)  # in the compute dtype under mixed precision
        self.params = place_params(params, param_shardings(params, mesh, rules), donate=True)
        self._logprobs = logprob_fn(self.graphdef, temperature=temperature)

    @classmethod
    def of_lora_base(
        cls, actor: Learner, model: nnx.Module, *, temperature: float, forward_batch: int = 0
    ) -> Reference:
        """The reference of a LoRA actor: `model` (the adapted policy) with adapters off, reading
        `actor.frozen` (shared with the actor, never donated by its step)."""
        if actor.frozen is None:
            raise ValueError("Reference.of_lora_base: the actor has no LoRA adapters.")
        reference = cls.__new__(cls)
        reference.mesh, reference.rules = actor.mesh, actor.rules
        reference.forward_batch = forward_batch
        reference.graphdef = nnx.split(strip_adapters(model), nnx.Param)[0]
        reference.params = actor.frozen
        reference._logprobs = logprob_fn(reference.graphdef, temperature=temperature)
        return reference

    def logprobs(self, tokens_bt) -> np.ndarray:
        """float32 [B, T] log-probs of `tokens_bt` (int32 [B, T], the `Rollout` layout), in
        chunks of `forward_batch` rows."""

        def forward(rows_bt):
            tokens = place_batch(np.asarray(rows_bt, np.int32), self.mesh, self.rules)
            with use_layout(layout(self.mesh, self.rules)):
                return np.asarray(self._logprobs(self.params, tokens))

        return in_row_chunks(forward, tokens_bt, self.forward_batch)
