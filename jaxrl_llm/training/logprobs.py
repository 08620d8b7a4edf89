"""Teacher-forced token log-probs of a policy, through the fused kernel (no [B, T, V] logits).

The layout matches `jaxrl_llm.rollout.Rollout`: `logp_bt[b, t]` is the log-prob of `tokens[b, t]`
given `tokens[b, :t]`, computed from the hidden state at t - 1; column 0 has no prefix and is 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_llm.models import partitioning
from jaxrl_llm.models.transformer import Transformer
from kernels.logprobs import default_implementation, token_logprobs, token_logprobs_sharded

Array = jax.Array


def sequence_logprobs(
    model: Transformer,
    tokens_bt: Array,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
    implementation: str | None = None,
    remat: bool = False,
    positions_bt: Array | None = None,
    segment_ids_bt: Array | None = None,
) -> tuple[Array, Array | None]:
    """Log-probs (and entropies) of every token of `tokens_bt` under `model`.

    Args:
      model: the policy (or the frozen reference).
      tokens_bt: int32 [B, T] sequences, left-aligned (prompt, completion, padding).
      temperature: the sampling temperature; logits are divided by it (match the rollout's).
      return_entropy: also return the entropy of each next-token distribution.
      implementation: the `kernels.logprobs` backend; None picks by device.
      remat: gradient checkpointing per layer (see `Transformer.hidden_states`).
      positions_bt, segment_ids_bt: int32 [B, T] for packed rows (`jaxrl_llm.training.packing`);
        None for one sequence per row. In a packed row, the first token of each sequence gets
        the log-prob of following the previous sequence: mask it out (it is a prompt token).

    Returns:
      (logp_bt float32 [B, T], entropy_bt float32 [B, T] or None); column 0 is 0 in both.
      `entropy_bt[b, t]` is the entropy of the distribution that produced `tokens[b, t]`.
    """
    if tokens_bt.ndim != 2:
        raise ValueError(f"sequence_logprobs: tokens_bt must be [B, T], got {tokens_bt.shape}.")
    hidden_btd, _ = model.hidden_states(
        tokens_bt, positions_bt=positions_bt, segment_ids_bt=segment_ids_bt, remat=remat
    )
    unembed_dv = model.unembed_matrix()
    options = dict(
        temperature=temperature, return_entropy=return_entropy, implementation=implementation
    )
    layout = partitioning.current_layout()
    if implementation is None and layout is not None:
        # The kernel of the devices the program is for (a TPU slice compiled from a CPU host
        # gets the Pallas TPU kernel), not of the host's default backend.
        platform = layout.mesh.devices.flat[0].platform
        kernels_on = partitioning.layout_kernels_enabled()
        options["implementation"] = default_implementation(platform) if kernels_on else "xla"
    if layout is None:
        logp, entropy = token_logprobs(hidden_btd[:, :-1], unembed_dv, tokens_bt[:, 1:], **options)
    else:  # vocabulary-parallel under the role's mesh (kernels/logprobs/sharded.py)
        logp, entropy = token_logprobs_sharded(
            hidden_btd[:, :-1],
            unembed_dv,
            tokens_bt[:, 1:],
            mesh=layout.mesh,
            batch_axes=layout.mesh_axes("batch", tokens_bt.shape[0]),
            vocab_axes=layout.mesh_axes("vocab", unembed_dv.shape[1]),
            **options,
        )
    pad = jnp.zeros((tokens_bt.shape[0], 1), jnp.float32)
    logp_bt = jnp.concatenate([pad, logp], axis=1)
    entropy_bt = None if entropy is None else jnp.concatenate([pad, entropy], axis=1)
    return logp_bt, entropy_bt
