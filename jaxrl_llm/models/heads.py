"""A scalar head on a Transformer trunk: the critic's value model and a reward model.

    value_bt = ScalarHeadModel(trunk).token_scores(tokens_bt)       # [B, T], aligned like logp
    score_b  = ScalarHeadModel(trunk).sequence_scores(tokens_bt, lengths_b)   # [B]
    step_bs  = ScalarHeadModel(trunk).scores_at(tokens_bt, step_end_bs)       # [B, S]

The head is one [D] weight and a bias on the trunk's final-normed hidden states. Alignment
follows `jaxrl_llm.training.sequence_logprobs`: column t of `token_scores` is read from the hidden
state at t - 1, so `value_bt[b, t]` is V(s_t), the value of the prefix that token t continues, in
the same column as that token's log-prob; column 0 is 0.

A reward model's head starts as in "The N+ Implementation Details of RLHF with PPO" (2403.17031),
detail 4: normal with std 1 / sqrt(D + 1), bias 0. A critic made from the policy starts with a
zero head (`from_policy`): V = 0 everywhere, so its first advantages are the plain returns
instead of the noise of a random head, and explained variance starts at 0, not below it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

from jaxrl_llm.models.config import ModelConfig, RopeScaling
from jaxrl_llm.models.layers import param
from jaxrl_llm.models.transformer import Transformer

Array = jax.Array


class ScalarHeadModel(nnx.Module):
    """A Transformer trunk (its LM head unused) and a scalar head per position.

    Args:
      trunk: the `Transformer` whose hidden states feed the head; it is owned (not copied).
      rngs: random stream for the head's initial weights.
      head_init: "normal" (std 1 / sqrt(D + 1)) or "zeros".

    Example:
      >>> critic = ScalarHeadModel.from_policy(policy, seed=0)
      >>> values_bt = critic.token_scores(tokens_bt)   # [B, T]
    """

    def __init__(self, trunk: Transformer, *, rngs: nnx.Rngs, head_init: str = "normal"):
        if head_init not in ("normal", "zeros"):
            raise ValueError(f"ScalarHeadModel: {head_init=} must be 'normal' or 'zeros'.")
        self.trunk = trunk
        width = trunk.config.hidden_size
        std = 1.0 / math.sqrt(width + 1) if head_init == "normal" else 0.0
        weight = std * jax.random.normal(rngs.params(), (width,), jnp.float32)
        self.head = nnx.Param(weight, logical_axes=("embed",))
        self.bias = param(None, (1,), jnp.float32, ("norm",), init="zeros")

    @classmethod
    def from_policy(
        cls, policy: Transformer, *, seed: int = 0, head_init: str = "zeros"
    ) -> ScalarHeadModel:
        """A new model whose trunk is a copy of `policy`'s weights and whose head is fresh.

        The arrays are copied (not shared), so donating the policy's buffers in its train step
        leaves the critic intact.
        """
        graphdef, state = nnx.split(policy)
        trunk = nnx.merge(graphdef, jax.tree.map(jnp.copy, state))
        return cls(trunk, rngs=nnx.Rngs(params=seed), head_init=head_init)

    def _scores(self, hidden_btd: Array) -> Array:
        hidden = hidden_btd.astype(jnp.float32)
        return jnp.einsum("btd,d->bt", hidden, self.head[...]) + self.bias[...][0]

    def token_scores(
        self,
        tokens_bt: Array,
        *,
        positions_bt: Array | None = None,
        segment_ids_bt: Array | None = None,
        remat: bool = False,
    ) -> Array:
        """Scores [B, T] float32; column t from the hidden state at t - 1, column 0 is 0.

        Args:
          tokens_bt: int32 [B, T] sequences, left-aligned (as `Rollout.tokens`).
          positions_bt, segment_ids_bt: int32 [B, T] for packed rows, else None.
          remat: gradient checkpointing per layer.
        """
        hidden_btd, _ = self.trunk.hidden_states(
            tokens_bt, positions_bt=positions_bt, segment_ids_bt=segment_ids_bt, remat=remat
        )
        scores_bt = self._scores(hidden_btd[:, :-1])
        pad = jnp.zeros((tokens_bt.shape[0], 1), jnp.float32)
        return jnp.concatenate([pad, scores_bt], axis=1)

    def scores_at(self, tokens_bt: Array, index_bs: Array, *, remat: bool | str = False) -> Array:
        """Scores [B, S] float32 read at the hidden states of tokens `index_bs` (int32 [B, S],
        clipped to [0, T - 1]): the model's score of each prefix ending at those tokens (a
        process reward model's step scores, at each step's last token). `remat`: gradient
        checkpointing per layer (`Transformer.hidden_states`)."""
        hidden_btd, _ = self.trunk.hidden_states(tokens_bt, remat=remat)
        index = jnp.clip(index_bs, 0, tokens_bt.shape[1] - 1)
        hidden_bsd = jnp.take_along_axis(hidden_btd, index[:, :, None], axis=1)
        return self._scores(hidden_bsd)

    def sequence_scores(
        self, tokens_bt: Array, lengths_b: Array, *, remat: bool | str = False
    ) -> Array:
        """One score [B] per sequence, read at its last real token (reward-model style).

        Args:
          tokens_bt: int32 [B, T], left-aligned sequences padded on the right.
          lengths_b: int32 [B], the number of real tokens of each row (>= 1).
          remat: gradient checkpointing per layer.
        """
        return self.scores_at(tokens_bt, (lengths_b - 1)[:, None], remat=remat)[:, 0]


_CONFIG_FILE = "model_config.json"
_PARAMS_DIR = "params"


def save_scalar_model(model: ScalarHeadModel, directory: str) -> None:
    """Writes a scalar-head model (trunk architecture as JSON, parameters with orbax).

    The directory is what `load_scalar_model` reads, and what `config.critic.init` accepts to
    start a critic from a reward model.
    """
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, _CONFIG_FILE), "w") as f:
        json.dump(dataclasses.asdict(model.trunk.config), f, indent=2)
    params = nnx.state(model, nnx.Param)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(os.path.join(directory, _PARAMS_DIR), params, force=True)


def load_scalar_model(directory: str) -> ScalarHeadModel:
    """Reads a model written by `save_scalar_model`.

    Raises:
      FileNotFoundError: the directory or its files are missing (names the expected layout).
    """
    directory = os.path.abspath(directory)
    config_path = os.path.join(directory, _CONFIG_FILE)
    if not os.path.isfile(config_path):
        raise FileNotFoundError(
            f"No scalar-head model in {directory!r}: expected {_CONFIG_FILE} and {_PARAMS_DIR}/ "
            "as written by jaxrl_llm.models.save_scalar_model."
        )
    with open(config_path) as f:
        fields = json.load(f)
    if fields.get("rope_scaling") is not None:
        fields["rope_scaling"] = RopeScaling(**fields["rope_scaling"])
    config = ModelConfig(**fields)
    abstract = nnx.eval_shape(
        lambda: ScalarHeadModel(Transformer(config, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(0))
    )
    graphdef, abstract_params = nnx.split(abstract, nnx.Param)
    with ocp.StandardCheckpointer() as checkpointer:
        params = checkpointer.restore(os.path.join(directory, _PARAMS_DIR), abstract_params)
    return nnx.merge(graphdef, params)
