"""Pallas GPU forward kernel for fused token log-probs (Triton lowering), blocked XLA backward.

Why Triton and not Mosaic GPU. JAX 0.11 deprecates the Pallas Triton backend in favour of
Mosaic GPU on sm90+ (H100/H200), and Mosaic GPU is where this kernel should end up. It is
written for the Triton lowering for now because:

- Mosaic GPU has no lowering for ``jnp.dot``: its matmuls are explicit ``plgpu.wgmma`` calls on
  swizzled shared-memory tiles fed by TMA copies and barriers, i.e. a hand-scheduled pipeline;
- none of that can be checked where this was written (no GPU lent; jax 0.10.2 on CPU, whose
  Mosaic GPU interpreter is private and runs a single block of the grid), while the body below
  runs unchanged in the generic Pallas interpreter, where the tests check it on CPU;
- the lent GPU machines run jax 0.11.2, in which the Triton lowering still works (with a
  deprecation warning).

A Mosaic GPU port (warpgroup ``wgmma`` over TMA-pipelined ``W`` tiles) is the follow-up, once a
GPU is lent to measure it against this one.

The kernel. Grid ``(ceil(N / bt), num_v_splits)``; a GPU grid has no sequential axis, so each
program loops *inside* the kernel over its share of vocabulary blocks, and over ``D`` in
``block_d`` chunks (Triton tensors must have power-of-2 sizes; SmolLM2's D = 576 = 9 x 64).
Each ``[bt, bv]`` logit tile exists only in registers; the online statistics of
``chunked.update_stats`` are carried by the loop. Per split it writes ``[N]`` partial
statistics, merged by ``chunked.merge_stats`` in XLA (flash-decoding style: more programs when
``B * T`` is small, as in rollout scoring). Loads past ``N`` rows or ``V`` columns are masked.

The backward is ``chunked.backward`` (cuBLAS matmuls per vocabulary block), not a Pallas kernel:
its two reductions produce ``D``-wide results (``dh`` over the vocabulary, ``dW`` over tokens)
whose float32 accumulators (e.g. 64 x 2048 x 4 B = 512 KiB for ``dh``) exceed a program's
registers and shared memory for D >= 1024, so a fused GPU backward needs either ``D``-tiling
(recomputing each logit tile D / block_d times) or float atomics across programs
(non-deterministic sums, as in Cut Cross-Entropy, arXiv:2411.09009). The blocked XLA backward
keeps the memory bound (one ``[block_t, block_v]`` tile at a time) and runs its three GEMMs on
cuBLAS.

tokamax (0.0.12, installed as the benchmark peer) ships only an XLA and a Mosaic TPU
implementation of its linear softmax cross-entropy, and it returns a summed loss, not per-token
log-probs and entropies, so it is not usable as this backend.

Matmul precision follows ``jnp.dot``'s (``jax_default_matmul_precision``): for float32 inputs
the default is TF32 on the tensor cores, as for XLA's own GPU matmuls; bfloat16 inputs (the
train step's) multiply exactly and accumulate in float32.

Verified here only in interpret mode on CPU; not yet compiled on a GPU.
"""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from kernels.logprobs import chunked
from kernels.logprobs.config import BlockConfig

__all__ = ["forward", "TRACE_COUNTS"]

# Kernel name -> number of times its body was traced (tests assert it moves).
TRACE_COUNTS: collections.Counter[str] = collections.Counter()


def _fwd_kernel(
    t_ref, h_ref, w_ref, m_ref, s_ref, b_ref, zt_ref,
    *, inv_temp, n_rows, vocab, model_dim, block_t, block_v, block_d, blocks_per_split,
    with_entropy,
):  # fmt: skip
    TRACE_COUNTS["gpu_fwd"] += 1
    i, split = pl.program_id(0), pl.program_id(1)
    r0 = i * block_t
    rows = r0 + jax.lax.broadcasted_iota(jnp.int32, (block_t, 1), 0)
    row_ok = rows < n_rows
    targets = pltriton.load(t_ref.at[pl.ds(r0, block_t), :], mask=row_ok, other=-1)

    def v_step(k, stats):
        v0 = (split * blocks_per_split + k) * block_v
        cols = v0 + jax.lax.broadcasted_iota(jnp.int32, (1, block_v), 1)
        col_ok = cols < vocab  # all False for a split's blocks past the end: no-op update

        def d_step(c, z):
            d0 = pl.multiple_of(c * block_d, block_d)
            h = pltriton.load(
                h_ref.at[pl.ds(r0, block_t), pl.ds(d0, block_d)], mask=row_ok, other=0.0
            )
            w = pltriton.load(
                w_ref.at[pl.ds(d0, block_d), pl.ds(v0, block_v)], mask=col_ok, other=0.0
            )
            return z + jnp.dot(h, w, preferred_element_type=jnp.float32)

        z = jax.lax.fori_loop(
            0, model_dim // block_d, d_step, jnp.zeros((block_t, block_v), jnp.float32)
        )
        return chunked.update_stats(
            stats, z * inv_temp, cols, col_ok, targets, with_entropy=with_entropy
        )

    stats = jax.lax.fori_loop(0, blocks_per_split, v_step, chunked.init_stats(block_t))
    for ref, value in zip((m_ref, s_ref, b_ref, zt_ref), stats, strict=True):
        pltriton.store(ref.at[split, pl.ds(r0, block_t), :], value, mask=row_ok)


def forward(
    h_nd: jax.Array,
    w_dv: jax.Array,
    targets_n: jax.Array,
    *,
    inv_temp: float,
    config: BlockConfig,
    with_entropy: bool,
    interpret=False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Forward kernel; same contract as ``chunked.forward`` (returns ``(logp, entropy, lse)``).

    ``interpret=True`` runs the body in the generic Pallas interpreter (any device).
    """
    n, d = h_nd.shape
    vocab = w_dv.shape[1]
    bt, bv, bd, splits = config.block_t, config.block_v, config.block_d, config.num_v_splits
    blocks_per_split = pl.cdiv(pl.cdiv(vocab, bv), splits)
    kernel = functools.partial(
        _fwd_kernel,
        inv_temp=inv_temp,
        n_rows=n,
        vocab=vocab,
        model_dim=d,
        block_t=bt,
        block_v=bv,
        block_d=bd,
        blocks_per_split=blocks_per_split,
        with_entropy=with_entropy,
    )
    stat = jax.ShapeDtypeStruct((splits, n, 1), jnp.float32)
    stats = pl.pallas_call(
        kernel,
        grid=(pl.cdiv(n, bt), splits),
        out_shape=[stat] * 4,
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2),
        interpret=interpret,
        name="token_logprobs_fwd",
    )(targets_n.reshape(n, 1), h_nd, w_dv)
    merged = chunked.merge_stats(chunked.RunningStats(*stats), axis=0)
    return tuple(x.reshape(n) for x in chunked.finalize_stats(merged))
