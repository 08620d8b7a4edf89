"""Vocabulary-parallel token log-probs: the unembedding split by columns over mesh axes.

Under tensor parallelism the unembedding ``[D, V]`` is split by vocabulary columns. Handing the
split matrix to a blocked kernel under automatic (GSPMD) partitioning makes XLA all-gather the
whole ``[D, V]`` in every vocabulary block it slices (measured on a v5e topology: about 2 TB
received per device per train step of an 8B model, docs/scale.md). This wrapper runs the kernel
on each device's own columns under ``shard_map`` and merges the per-shard statistics with three
scalar-per-row collectives over the vocabulary axes, as Megatron-LM's vocabulary-parallel
cross-entropy does ("Megatron-LM", Shoeybi et al., arXiv:1909.08053, section 3):

    lse     = log sum_i exp(lse_i)                      (pmax + psum)
    logp    = sum_i (logp_i + lse_i) - lse              (logp_i + lse_i: the target's logit on
                                                          its shard, 0 on the others)
    entropy = lse - sum_i exp(lse_i - lse) (lse_i - entropy_i)   (E_p[z] = lse_i - entropy_i)

Rows (tokens) stay split over the batch axes. Gradients flow through the kernel's custom VJP
on each shard (``token_stats`` carries the log-sum-exp's cotangent) and through the collectives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from kernels.logprobs.api import token_stats

__all__ = ["token_logprobs_sharded"]


def _axes(names: Sequence[str]) -> tuple[str, ...] | None:
    names = tuple(names)
    return names or None


def token_logprobs_sharded(
    hidden_btd: jax.Array,
    unembed_dv: jax.Array,
    targets_bt: jax.Array,
    *,
    mesh: Mesh,
    batch_axes: Sequence[str] = (),
    vocab_axes: Sequence[str] = (),
    temperature: float = 1.0,
    return_entropy: bool = True,
    implementation: str | None = None,
    interpret: Any = False,
    block_t: int | None = None,
    block_v: int | None = None,
) -> tuple[jax.Array, jax.Array | None]:
    """`token_logprobs` with rows split over `batch_axes` and vocabulary over `vocab_axes`.

    Args:
      hidden_btd, unembed_dv, targets_bt: as `token_logprobs`; B must divide by the product
        of the batch axes' sizes and V by the vocabulary axes'.
      mesh: the mesh the axes belong to.
      batch_axes: mesh axes the rows are split over (() to replicate them).
      vocab_axes: mesh axes the unembedding's columns are split over.
      temperature, return_entropy, implementation, interpret, block_t, block_v: as
        `token_logprobs`, applied to each shard.

    Returns:
      ``(logp_bt, entropy_bt or None)``, float32 ``[B, T]``, split over the batch axes.

    Raises:
      ValueError: a dimension that does not divide over its axes.

    Example:
      >>> logp, ent = token_logprobs_sharded(h, w, y, mesh=mesh, batch_axes=("data",),
      ...                                    vocab_axes=("model",), temperature=0.7)
    """
    batch_axes, vocab_axes = tuple(batch_axes), tuple(vocab_axes)
    size = lambda axes: math.prod(mesh.shape[a] for a in axes)
    if hidden_btd.shape[0] % size(batch_axes) or unembed_dv.shape[1] % size(vocab_axes):
        raise ValueError(
            f"token_logprobs_sharded: B={hidden_btd.shape[0]} must divide over {batch_axes} "
            f"({size(batch_axes)}) and V={unembed_dv.shape[1]} over {vocab_axes} "
            f"({size(vocab_axes)})."
        )
    options = dict(
        temperature=temperature,
        return_entropy=return_entropy,
        implementation=implementation,
        interpret=interpret,
        block_t=block_t,
        block_v=block_v,
    )

    def local(h_btd, w_dv, t_bt):
        if not vocab_axes:
            logp, ent, _ = token_stats(h_btd, w_dv, t_bt, **options)
            return logp, ent
        offset = jax.lax.axis_index(vocab_axes) * w_dv.shape[1]
        logp_i, ent_i, lse_i = token_stats(h_btd, w_dv, t_bt - offset, **options)
        peak = jax.lax.pmax(jax.lax.stop_gradient(lse_i), vocab_axes)
        lse = peak + jnp.log(jax.lax.psum(jnp.exp(lse_i - peak), vocab_axes))
        logp = jax.lax.psum(logp_i + lse_i, vocab_axes) - lse
        if not return_entropy:
            return logp, None
        mean_z = jax.lax.psum(jnp.exp(lse_i - lse) * (lse_i - ent_i), vocab_axes)
        return logp, lse - mean_z

    rows = PartitionSpec(_axes(batch_axes), None)
    out_specs = (rows, rows if return_entropy else None)
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(
            PartitionSpec(_axes(batch_axes), None, None),
            PartitionSpec(None, _axes(vocab_axes)),
            rows,
        ),
        out_specs=out_specs,
        check_vma=False,
    )(hidden_btd, unembed_dv, targets_bt)
