"""Pallas TPU (Mosaic) kernels for fused token log-probs: forward and backward.

Three ``pallas_call``s over a ``(row block, vocabulary block)`` grid whose reduction axis is
marked ``"arbitrary"``, so a TPU core visits it in order and an output block stays resident in
VMEM across it (the accumulate-in-scratch pattern of JAX's Pallas TPU matmul and flash attention):

- forward, grid ``(nt, nv)``: the ``[bt, bv]`` logit tile ``h_blk @ W_blk`` lives only in VMEM;
  the online log-sum-exp statistics (``chunked.update_stats``) sit in ``[bt, 1]`` VMEM scratch
  and the last vocabulary step writes log-prob, entropy and log-sum-exp.
- ``dh``, grid ``(nt, nv)``: recomputes the tile, forms ``dlogits`` (``chunked.logit_grads``)
  and accumulates ``dlogits @ W_blk^T`` into a float32 ``[bt, D]`` scratch.
- ``dW``, grid ``(nv, nt)``: the same tile, accumulating ``h_blk^T @ dlogits`` into a float32
  ``[D, bv]`` scratch over the row blocks.

The backward therefore computes each logit tile twice (five matmuls in all against three for the
naive path): the price of never writing ``[N, V]`` to HBM and of keeping both reductions
race-free. tokamax's TPU linear-softmax-cross-entropy kernel (which returns only a summed loss,
without per-token values, temperature or entropy, so it cannot serve the RL loss) instead fuses
the backward into one kernel with manual DMAs; that is the next step if profiles ask for it.

``D`` is not blocked (a ``[bt, D]`` and a ``[D, bv]`` block are in VMEM at once), which suits
D <= 4096 with the default 256 x 512 blocks. Ragged edges: blocks overhang the arrays and the
kernels mask rows ``>= N`` and columns ``>= V`` with ``jnp.where`` (never by multiplying, since
the overhang holds garbage; interpret mode fills it with NaN, which the tests rely on).

Numerics verified in TPU interpret mode on CPU (``pltpu.InterpretParams``); compiled by Mosaic
for v5e and v5p inside the 8B train step through libtpu on a CPU (``jaxrl_llm.scale``,
docs/scale.md); not yet run on a TPU.
"""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels.logprobs import chunked
from kernels.logprobs.config import BlockConfig

__all__ = ["forward", "backward", "TRACE_COUNTS"]

# Scoped VMEM the kernels may use: above the 16 MiB default (an 8B model's backward blocks,
# double-buffered, with their float32 accumulators, needed about 18 MiB), well inside the 128 MiB
# of VMEM of v5e, v5p and v6e.
VMEM_LIMIT_BYTES = 48 * 2**20

# Kernel name -> number of times its body was traced. Tests assert it moves, so a silent
# fallback to another path cannot pass for the kernel.
TRACE_COUNTS: collections.Counter[str] = collections.Counter()


def _interpret_arg(interpret):
    """True -> TPU interpret parameters (simulated VMEM, NaN-filled overhang); else as given."""
    return pltpu.InterpretParams() if interpret is True else interpret


def _tile_ids(rows_at, cols_at, block_t, block_v):
    rows = rows_at + jax.lax.broadcasted_iota(jnp.int32, (block_t, 1), 0)
    cols = cols_at + jax.lax.broadcasted_iota(jnp.int32, (1, block_v), 1)
    return rows, cols


def _mxu_precision(dtype) -> jax.lax.Precision | None:
    """The matmul precision to name: DEFAULT for 16-bit operands, else the configured one.

    Mosaic rejects a bfloat16 matmul asked for float32 contraction precision ("Bad lhs type"),
    which is what ``jax_default_matmul_precision="highest"`` (set by our tests, and by users who
    want exact float32 matmuls) asks of every dot. A bfloat16 x bfloat16 product accumulated in
    float32 is exact at DEFAULT on the MXU, so nothing is lost by naming it.
    """
    return jax.lax.Precision.DEFAULT if jnp.dtype(dtype).itemsize < 4 else None


def _masked_tile(h_ref, w_ref, rows, cols, *, n_rows, vocab, mask_rows, inv_temp):
    """Loads h and W blocks, zeroes their overhang, returns (h, W, tempered float32 logits)."""
    h, w = h_ref[...], w_ref[...]
    if mask_rows:
        h = jnp.where(rows < n_rows, h, jnp.zeros_like(h))
    if vocab % w.shape[1]:
        w = jnp.where(cols < vocab, w, jnp.zeros_like(w))
    z = jnp.dot(h, w, precision=_mxu_precision(h.dtype), preferred_element_type=jnp.float32)
    z = z * inv_temp
    return h, w, z


def _fwd_kernel(
    t_ref, h_ref, w_ref, logp_ref, ent_ref, lse_ref, m_sc, s_sc, b_sc, zt_sc,
    *, inv_temp, vocab, with_entropy,
):  # fmt: skip
    TRACE_COUNTS["tpu_fwd"] += 1
    j = pl.program_id(1)
    block_t, block_v = t_ref.shape[0], w_ref.shape[1]

    @pl.when(j == 0)
    def _init():
        m_sc[...], s_sc[...], b_sc[...], zt_sc[...] = chunked.init_stats(block_t)

    _, cols = _tile_ids(0, j * block_v, block_t, block_v)
    valid = cols < vocab if vocab % block_v else None
    _, _, z = _masked_tile(
        h_ref, w_ref, None, cols, n_rows=None, vocab=vocab, mask_rows=False, inv_temp=inv_temp
    )
    stats = chunked.RunningStats(m_sc[...], s_sc[...], b_sc[...], zt_sc[...])
    stats = chunked.update_stats(stats, z, cols, valid, t_ref[...], with_entropy=with_entropy)
    m_sc[...], s_sc[...], b_sc[...], zt_sc[...] = stats

    @pl.when(j == pl.num_programs(1) - 1)
    def _finish():
        logp_ref[...], ent_ref[...], lse_ref[...] = chunked.finalize_stats(stats)


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
    """Forward kernel; same contract as ``chunked.forward`` (returns ``(logp, entropy, lse)``)."""
    n, d = h_nd.shape
    vocab = w_dv.shape[1]
    bt, bv = config.block_t, config.block_v
    row_block = pl.BlockSpec((bt, 1), lambda i, j: (i, 0))
    outs = pl.pallas_call(
        functools.partial(_fwd_kernel, inv_temp=inv_temp, vocab=vocab, with_entropy=with_entropy),
        grid=(pl.cdiv(n, bt), pl.cdiv(vocab, bv)),
        in_specs=[
            row_block,  # targets [N, 1]
            pl.BlockSpec((bt, d), lambda i, j: (i, 0)),  # hidden
            pl.BlockSpec((d, bv), lambda i, j: (0, j)),  # unembed
        ],
        out_specs=[row_block] * 3,
        out_shape=[jax.ShapeDtypeStruct((n, 1), jnp.float32)] * 3,
        scratch_shapes=[pltpu.VMEM((bt, 1), jnp.float32)] * 4,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        interpret=_interpret_arg(interpret),
        name="token_logprobs_fwd",
    )(targets_n.reshape(n, 1), h_nd, w_dv)
    return tuple(o.reshape(n) for o in outs)


def _bwd_kernel(
    t_ref, lse_ref, ent_ref, gl_ref, gp_ref, ge_ref, h_ref, w_ref, out_ref, acc_sc,
    *, inv_temp, n_rows, vocab, wrt,
):  # fmt: skip
    """Shared body of the dh (grid (i, j)) and dW (grid (j, i)) kernels; ``wrt`` picks which."""
    TRACE_COUNTS[f"tpu_bwd_{wrt}"] += 1
    # dh: grid (row block i, vocab block j); dW: grid (j, i). The last grid axis is always the
    # reduction ("arbitrary"), over which the output block stays resident.
    i, j = pl.program_id(0), pl.program_id(1)
    if wrt == "w":
        i, j = j, i
    block_t, block_v = t_ref.shape[0], w_ref.shape[1]

    @pl.when(pl.program_id(1) == 0)
    def _init():
        acc_sc[...] = jnp.zeros_like(acc_sc)

    rows, cols = _tile_ids(i * block_t, j * block_v, block_t, block_v)
    mask_rows = wrt == "w" and n_rows % block_t != 0  # dW sums over rows: overhang must be 0
    h, w, z = _masked_tile(
        h_ref, w_ref, rows, cols, n_rows=n_rows, vocab=vocab, mask_rows=mask_rows,
        inv_temp=inv_temp,
    )  # fmt: skip
    valid = cols < vocab if vocab % block_v else None
    if mask_rows:
        valid = rows < n_rows if valid is None else jnp.logical_and(valid, rows < n_rows)
    ge = None if ge_ref is None else ge_ref[...]
    dz = chunked.logit_grads(
        z, cols, valid, t_ref[...], lse_ref[...], ent_ref[...], gl_ref[...], ge,
        inv_temp=inv_temp, g_p=gp_ref[...],
    ).astype(w.dtype)  # fmt: skip
    if wrt == "h":  # [bt, bv] x [D, bv] -> [bt, D]
        acc_sc[...] += jax.lax.dot_general(
            dz, w, (((1,), (1,)), ((), ())), precision=_mxu_precision(w.dtype),
            preferred_element_type=jnp.float32,
        )  # fmt: skip
    else:  # [bt, D] x [bt, bv] -> [D, bv]
        acc_sc[...] += jax.lax.dot_general(
            h, dz, (((0,), (0,)), ((), ())), precision=_mxu_precision(h.dtype),
            preferred_element_type=jnp.float32,
        )  # fmt: skip

    @pl.when(pl.program_id(1) == pl.num_programs(1) - 1)
    def _finish():
        out_ref[...] = acc_sc[...].astype(out_ref.dtype)


def backward(
    h_nd: jax.Array,
    w_dv: jax.Array,
    targets_n: jax.Array,
    lse_n: jax.Array,
    entropy_n: jax.Array,
    g_logp_n: jax.Array,
    g_ent_n: jax.Array | None,
    *,
    inv_temp: float,
    config: BlockConfig,
    interpret=False,
    g_lse_n: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Backward kernels; same contract as ``chunked.backward`` (returns ``(dh, dW)``)."""
    n, d = h_nd.shape
    vocab = w_dv.shape[1]
    bt, bv = config.block_t, config.block_v
    nt, nv = pl.cdiv(n, bt), pl.cdiv(vocab, bv)
    g_p_n = g_logp_n if g_lse_n is None else g_logp_n - g_lse_n  # weight of -p (chunked.py)
    row_vecs = [targets_n, lse_n, entropy_n, g_logp_n, g_p_n]
    row_vecs += [] if g_ent_n is None else [g_ent_n]
    row_vecs = [x.reshape(n, 1) for x in row_vecs]

    def call(wrt):
        # Grid (row block, vocab block) for dh, (vocab block, row block) for dW.
        if wrt == "h":
            grid, ij = (nt, nv), lambda a, b: (a, b)
            out_spec = pl.BlockSpec((bt, d), lambda a, b: (a, 0))
            out_shape, acc = jax.ShapeDtypeStruct((n, d), h_nd.dtype), (bt, d)
        else:
            grid, ij = (nv, nt), lambda a, b: (b, a)
            out_spec = pl.BlockSpec((d, bv), lambda a, b: (0, a))
            out_shape, acc = jax.ShapeDtypeStruct((d, vocab), w_dv.dtype), (d, bv)
        row_spec = pl.BlockSpec((bt, 1), lambda a, b: (ij(a, b)[0], 0))
        kernel = functools.partial(_bwd_kernel, inv_temp=inv_temp, n_rows=n, vocab=vocab, wrt=wrt)
        if g_ent_n is None:  # keep one kernel signature: pass ge_ref=None
            kernel = _drop_ge(kernel)
        return pl.pallas_call(
            kernel,
            grid=grid,
            in_specs=[row_spec] * len(row_vecs)
            + [
                pl.BlockSpec((bt, d), lambda a, b: (ij(a, b)[0], 0)),
                pl.BlockSpec((d, bv), lambda a, b: (0, ij(a, b)[1])),
            ],
            out_specs=out_spec,
            out_shape=out_shape,
            scratch_shapes=[pltpu.VMEM(acc, jnp.float32)],
            compiler_params=pltpu.CompilerParams(
                dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
            ),
            interpret=_interpret_arg(interpret),
            name=f"token_logprobs_bwd_d{wrt}",
        )(*row_vecs, h_nd, w_dv)

    return call("h"), call("w")


def _drop_ge(kernel):
    """Adapts the backward body to a call without the entropy cotangent input."""

    def wrapped(t_ref, lse_ref, ent_ref, gl_ref, gp_ref, h_ref, w_ref, out_ref, acc_sc):
        kernel(t_ref, lse_ref, ent_ref, gl_ref, gp_ref, None, h_ref, w_ref, out_ref, acc_sc)

    return wrapped
