"""The critic role: a value model (`ScalarHeadModel`) with its own train state and optimizer."""

from __future__ import annotations

import jax
import numpy as np
import optax
from jax.sharding import Mesh

from jaxrl_llm.models.heads import ScalarHeadModel, load_scalar_model
from jaxrl_llm.models.partitioning import use_layout
from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.models.transformer import Transformer
from jaxrl_llm.roles.forwards import in_row_chunks
from jaxrl_llm.roles.learner import Learner, place_batch
from jaxrl_llm.sharding import layout
from jaxrl_llm.training.train_step import LossFn


def init_value_model(init: str, policy: Transformer, *, seed: int = 0) -> ScalarHeadModel:
    """The critic's starting weights: "policy" (a copy of its trunk, fresh head) or a directory
    of a saved scalar-head model (a reward model, `save_scalar_model`)."""
    if init == "policy":
        return ScalarHeadModel.from_policy(policy, seed=seed)
    model = load_scalar_model(init)
    if model.trunk.config.vocab_size != policy.config.vocab_size:
        raise ValueError(
            f"config.critic.init={init!r}: its vocabulary ({model.trunk.config.vocab_size}) differs "
            f"from the policy's ({policy.config.vocab_size}); the critic reads the policy's tokens."
        )
    return model


def value_fn(graphdef):
    """A jitted `(params, tokens_bt) -> values_bt` of a value model's graph: float32 [B, T]
    values V(s_t) of int32 [B, T] tokens (column 0 zero)."""

    def values(params, tokens_bt):
        return merge_for_compute(graphdef, params).token_scores(tokens_bt)

    return jax.jit(values)


class Critic(Learner):
    """A `Learner` over a `ScalarHeadModel`, plus the jitted value forward of a rollout, run
    `forward_batch` rows at a time (`config.rollout.forward_batch`, `roles.forwards`; 0: every
    row of a call at once).

    Example:
      >>> critic = Critic(init_value_model("policy", policy), tx, algorithm.critic_loss, mesh)
      >>> values_bt = critic.values(rollout.tokens)      # numpy [B, T], V(s_t) in column t
    """

    def __init__(
        self,
        model: ScalarHeadModel,
        optimizer: optax.GradientTransformation,
        loss_fn: LossFn,
        mesh: Mesh,
        *,
        forward_batch: int = 0,
    ):
        super().__init__(model, optimizer, loss_fn, mesh)
        self._values = value_fn(self.graphdef)
        self.forward_batch = forward_batch

    def values(self, tokens_bt) -> np.ndarray:
        """float32 [B, T] values of `tokens_bt` (int32 [B, T]), column 0 zero, in chunks of
        `forward_batch` rows."""

        def forward(rows_bt):
            tokens = place_batch(np.asarray(rows_bt, np.int32), self.mesh, self.rules)
            with use_layout(layout(self.mesh, self.rules)):
                return np.asarray(self._values(self.params, tokens))

        return in_row_chunks(forward, tokens_bt, self.forward_batch)
