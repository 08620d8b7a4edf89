"""The reference role: log-probs of the initial policy (or of its moving average), for KL penalties.

With LoRA the initial policy is the base model with its adapters off, and its weights are the
ones the actor keeps frozen: `Reference.of_lora_base` reads the actor's base state in place (no
second copy of the weights), through the graph of the model without adapters.

With `config.reference.ema_decay = d > 0` the reference follows the policy: after each optimizer
update of the actor, `Reference.ema_update` sets

    ref <- d * ref + (1 - d) * policy

an exponential moving average of the policy, one of the three factors "Is DPO Superior to PPO
for LLM Alignment? A Comprehensive Study" (Xu et al., 2404.10719) find PPO needs. The KL penalty
then keeps each update near the recent policies rather than the initial one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
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

__all__ = [
    "Reference",
    "ema_fn",
    "logprob_fn",
    "reference_section",
    "validate_reference_section",
]


def reference_section() -> ml_collections.ConfigDict:
    """The `config.reference` section of algorithms whose KL penalty reads a reference."""
    c = ml_collections.ConfigDict()
    # 0: the reference is the frozen initial policy. d in (0, 1): after each optimizer update
    # of the actor, ref <- d * ref + (1 - d) * policy (Xu et al., 2404.10719); needs a reference
    # (config.loss.kl_beta > 0) that is a copy of the policy (not LoRA's frozen base).
    c.ema_decay = 0.0
    return c


def validate_reference_section(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming `config.reference.ema_decay` (and the field it clashes with) and
    the fix: a decay outside [0, 1), a moving reference no loss reads (kl_beta 0), or one that
    is LoRA's frozen base."""
    decay = config.reference.ema_decay
    if not (isinstance(decay, (int, float)) and 0.0 <= decay < 1.0):
        raise ValueError(
            f"config.reference.ema_decay={decay!r} must be in [0, 1): 0 keeps the initial "
            "policy as the reference, 0.99 moves it 1% of the way to the policy each update."
        )
    if decay == 0:
        return
    if not config.loss.kl_beta > 0:
        raise ValueError(
            f"config.reference.ema_decay={decay} moves a reference that no loss reads "
            f"(config.loss.kl_beta={config.loss.kl_beta}): set kl_beta > 0, or ema_decay=0."
        )
    lora = config.model.get("lora")
    if lora is not None and lora.rank > 0:
        raise ValueError(
            f"config.reference.ema_decay={decay} with config.model.lora.rank={lora.rank}: the "
            "LoRA reference is the frozen base the adapters are trained beside, which no average "
            "moves; set config.reference.ema_decay=0, or config.model.lora.rank=0 to train "
            "every weight."
        )


def ema_fn(shardings):
    """A jitted `(ref_params, policy_params, decay) -> ref_params` of the moving average
    `decay * ref + (1 - decay) * policy`, computed in float32 and stored in the reference's
    dtypes, laid out by `shardings` (the inputs are not donated: a judge may share the initial
    arrays)."""

    def ema(ref_params, policy_params, decay):
        def one(ref, policy):
            mixed = decay * ref.astype(jnp.float32) + (1.0 - decay) * policy.astype(jnp.float32)
            return mixed.astype(ref.dtype)

        return jax.tree.map(one, ref_params, policy_params)

    return jax.jit(ema, out_shardings=shardings)


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
      ema_decay: 0 keeps the copy frozen; in (0, 1) `ema_update` moves it toward the policy,
        and the copy keeps the policy's stored dtypes (the float32 master weights under mixed
        precision, so that small steps of the average are not rounded away).

    Example:
      >>> ref = Reference(policy, placement.train_mesh, temperature=0.7)
      >>> ref_logp_bt = ref.logprobs(rollout.tokens)       # numpy [B, T]
      >>> ref = Reference(policy, mesh, temperature=0.7, ema_decay=0.99)
      >>> ref.ema_update(actor.params)                     # after each actor update
    """

    def __init__(
        self,
        model: nnx.Module,
        mesh: Mesh,
        *,
        temperature: float,
        rules: Rules = TRAIN_RULES,
        forward_batch: int = 0,
        ema_decay: float = 0.0,
    ):
        self.mesh, self.rules, self.forward_batch = mesh, rules, forward_batch
        self.ema_decay = ema_decay
        self.graphdef, params = nnx.split(model, nnx.Param)
        if ema_decay:  # a moving average keeps the stored dtypes; the forward casts
            params = jax.tree.map(jnp.copy, params)
        else:  # in the compute dtype under mixed precision
            params = frozen_copy(model, params)
        shardings = param_shardings(params, mesh, rules)
        self.params = place_params(params, shardings, donate=True)
        self._logprobs = logprob_fn(self.graphdef, temperature=temperature)
        self._ema = ema_fn(shardings) if ema_decay else None

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
        reference.forward_batch, reference.ema_decay, reference._ema = forward_batch, 0.0, None
        reference.graphdef = nnx.split(strip_adapters(model), nnx.Param)[0]
        reference.params = actor.frozen
        reference._logprobs = logprob_fn(reference.graphdef, temperature=temperature)
        return reference

    def ema_update(self, policy_params: nnx.State) -> None:
        """`params <- ema_decay * params + (1 - ema_decay) * policy_params`: one step of the
        moving average toward the policy (`policy_params` the actor's full parameter state, in
        the train layout on this reference's mesh).

        Raises:
          ValueError: this reference is frozen (`ema_decay` 0, or LoRA's base).
        """
        if self._ema is None:
            raise ValueError(
                "Reference.ema_update: this reference is frozen (ema_decay=0 or LoRA's base); "
                "build it with ema_decay in (0, 1) (config.reference.ema_decay)."
            )
        with use_layout(layout(self.mesh, self.rules)):
            self.params = self._ema(self.params, policy_params, jnp.float32(self.ema_decay))

    def logprobs(self, tokens_bt) -> np.ndarray:
        """float32 [B, T] log-probs of `tokens_bt` (int32 [B, T], the `Rollout` layout), in
        chunks of `forward_batch` rows."""

        def forward(rows_bt):
            tokens = place_batch(np.asarray(rows_bt, np.int32), self.mesh, self.rules)
            with use_layout(layout(self.mesh, self.rules)):
                return np.asarray(self._logprobs(self.params, tokens))

        return in_row_chunks(forward, tokens_bt, self.forward_batch)
