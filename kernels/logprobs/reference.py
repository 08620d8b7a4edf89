"""Naive full-logits reference: the source of truth for every backend's values and gradients.

It builds the whole ``[B, T, V]`` float32 logit tensor, so it is for tests and for the
benchmark's baseline only. Gradients come from ``jax.grad`` through plain jnp.

Definitions (``z = hidden @ unembed / temperature`` in float32, ``p = softmax(z)``):

    logp[b, t]    = z[b, t, y] - logsumexp(z[b, t, :])      with y = targets[b, t]
    entropy[b, t] = -sum_v p[b, t, v] * log p[b, t, v]

A target outside ``[0, V)`` contributes a target logit of 0 (one-hot of an out-of-range index is
all zeros), so its log-prob is ``-logsumexp(z)``: finite and meaningless, for the caller to mask.
Every backend reproduces this convention.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

__all__ = ["token_logprobs_reference"]


def token_logprobs_reference(
    hidden_btd: jax.Array,
    unembed_dv: jax.Array,
    targets_bt: jax.Array,
    *,
    temperature: float = 1.0,
    return_entropy: bool = True,
) -> tuple[jax.Array, jax.Array | None]:
    """Token log-probs and entropies from materialised float32 logits.

    Args:
      hidden_btd: final hidden states ``[B, T, D]`` (any float dtype; upcast to float32).
      unembed_dv: unembedding matrix ``[D, V]``.
      targets_bt: int32 target token ids ``[B, T]``.
      temperature: logits are divided by it before the softmax.
      return_entropy: whether to compute the entropy.

    Returns:
      ``(logp_bt, entropy_bt)``, float32 ``[B, T]``; ``entropy_bt`` is None when
      ``return_entropy`` is False.

    Example:
      >>> h = jnp.zeros((1, 2, 4)); w = jnp.zeros((4, 8)); y = jnp.array([[0, 7]])
      >>> logp, ent = token_logprobs_reference(h, w, y)  # uniform: -log 8 and log 8
    """
    chex.assert_rank([hidden_btd, unembed_dv, targets_bt], [3, 2, 2])
    chex.assert_equal_shape_prefix([hidden_btd, targets_bt], 2)
    chex.assert_axis_dimension(unembed_dv, 0, hidden_btd.shape[-1])
    vocab = unembed_dv.shape[1]
    logits_btv = jnp.einsum(
        "btd,dv->btv",
        hidden_btd.astype(jnp.float32),
        unembed_dv.astype(jnp.float32),
        precision=jax.lax.Precision.HIGHEST,
    )
    logits_btv = logits_btv / temperature
    logp_all_btv = jax.nn.log_softmax(logits_btv, axis=-1)
    onehot_btv = jax.nn.one_hot(targets_bt, vocab, dtype=jnp.float32)
    lse_bt = jax.nn.logsumexp(logits_btv, axis=-1)
    logp_bt = jnp.sum(onehot_btv * logits_btv, axis=-1) - lse_bt
    if not return_entropy:
        return logp_bt, None
    entropy_bt = -jnp.sum(jnp.exp(logp_all_btv) * logp_all_btv, axis=-1)
    return logp_bt, entropy_bt
