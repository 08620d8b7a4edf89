"""Public entry point: token log-probs and entropies from hidden states, backend picked per device.

``token_logprobs`` never builds the ``[B, T, V]`` logits (except ``implementation="naive"``,
the test reference). A ``jax.custom_vjp`` saves only ``[B, T]`` residuals (log-sum-exp and
entropy) and the backward recomputes logit tiles block by block (see ``chunked.py`` for the math).

Backends:

- ``"xla"``: plain-jnp blocked scan (``chunked.py``); the default on CPU.
- ``"pallas_tpu"``: Mosaic TPU kernels, forward and backward; the default on TPU.
- ``"pallas_gpu"``: Pallas (Triton lowering) forward kernel + blocked XLA backward; the default
  on GPU (``pallas_gpu.py`` says why Triton and why the backward is XLA).
- ``"naive"``: full float32 logits with plain autodiff (``reference.py``); tests and baselines.

``interpret=True`` runs a Pallas backend's kernel bodies in interpret mode on any device (TPU
interpret parameters for ``pallas_tpu``; the generic interpreter for ``pallas_gpu``), which is
how the tests check them on CPU.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp

from kernels.logprobs import chunked, pallas_gpu, pallas_tpu
from kernels.logprobs.config import IMPLEMENTATIONS, BlockConfig, default_config
from kernels.logprobs.reference import token_logprobs_reference
from kernels.platforms import platform_backend as default_implementation

__all__ = ["token_logprobs", "token_stats", "default_implementation"]


@dataclasses.dataclass(frozen=True)
class _Static:
    """Everything the custom_vjp treats as a compile-time constant (hashable)."""

    implementation: str
    config: BlockConfig
    inv_temp: float
    with_entropy: bool
    interpret: Any


def _forward(static: _Static, h_nd, w_dv, t_n):
    kwargs = dict(inv_temp=static.inv_temp, config=static.config, with_entropy=static.with_entropy)
    if static.implementation == "xla":
        return chunked.forward(h_nd, w_dv, t_n, **kwargs)
    backend = pallas_tpu if static.implementation == "pallas_tpu" else pallas_gpu
    return backend.forward(h_nd, w_dv, t_n, interpret=static.interpret, **kwargs)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(static: _Static, h_nd, w_dv, t_n):
    return _forward(static, h_nd, w_dv, t_n)


def _fused_fwd(static: _Static, h_nd, w_dv, t_n):
    logp, ent, lse = _forward(static, h_nd, w_dv, t_n)
    return (logp, ent, lse), (h_nd, w_dv, t_n, lse, ent)


def _fused_bwd(static: _Static, residuals, cotangents):
    h_nd, w_dv, t_n, lse, ent = residuals
    g_logp, g_ent, g_lse = cotangents
    g_ent = g_ent if static.with_entropy else None
    kwargs = dict(inv_temp=static.inv_temp, g_lse_n=g_lse)
    if static.implementation == "pallas_tpu":
        dh, dw = pallas_tpu.backward(
            h_nd, w_dv, t_n, lse, ent, g_logp, g_ent,
            config=static.config, interpret=static.interpret, **kwargs,
        )  # fmt: skip
    else:
        # xla, and pallas_gpu (whose backward is the blocked XLA one; see pallas_gpu.py).
        n, d = h_nd.shape
        config = static.config
        if static.implementation != "xla":
            config = default_config("xla").fit("xla", tokens=n, vocab=w_dv.shape[1], model_dim=d)
        dh, dw = chunked.backward(h_nd, w_dv, t_n, lse, ent, g_logp, g_ent, config=config, **kwargs)
    return dh, dw, None


_fused.defvjp(_fused_fwd, _fused_bwd)


def token_logprobs(
    hidden_btd: jax.Array,
    unembed_dv: jax.Array,
    targets_bt: jax.Array,
    *,
    temperature: float = 1.0,
    return_entropy: bool = True,
    block_t: int | None = None,
    block_v: int | None = None,
    implementation: str | None = None,
    interpret: Any = False,
) -> tuple[jax.Array, jax.Array | None]:
    """Log-probs of target tokens (and entropies) without materialising ``[B, T, V]`` logits.

    ``logp[b, t] = log_softmax(hidden[b, t] @ unembed / temperature)[targets[b, t]]`` and
    ``entropy[b, t]`` is the entropy of that same tempered distribution. Both are float32 and
    differentiable with respect to ``hidden_btd`` and ``unembed_dv`` (gradients come back in
    their dtypes). Matmuls take the inputs' dtype (bfloat16 stays bfloat16) with float32
    accumulation; everything after the matmul is float32.

    Masking is the caller's: padded tokens get finite values (no NaN, whatever their hidden
    states), to be multiplied by a mask downstream. Targets outside ``[0, V)`` are treated as a
    target logit of 0 (see ``reference.py``).

    Args:
      hidden_btd: final hidden states ``[B, T, D]`` (after the final norm).
      unembed_dv: unembedding matrix ``[D, V]`` (the transposed embedding when tied).
      targets_bt: int32 ``[B, T]`` token ids.
      temperature: a positive Python float (static); logits are divided by it.
      return_entropy: if False, ``entropy_bt`` is None and the kernels skip its arithmetic.
      block_t: rows (tokens) per block; None for the backend's default. Need not divide B*T.
      block_v: vocabulary columns per block; None for the default. Need not divide V.
      implementation: ``"xla"``, ``"pallas_tpu"``, ``"pallas_gpu"`` or ``"naive"``; None picks
        by device (see :func:`default_implementation`).
      interpret: for the Pallas backends: False (compile for the device), True (interpret mode,
        runs on CPU), or a backend interpret-params object such as ``pltpu.InterpretParams``.

    Returns:
      ``(logp_bt, entropy_bt)``: float32 ``[B, T]``; ``entropy_bt`` is None when
      ``return_entropy`` is False.

    Raises:
      ValueError: unknown implementation, non-positive or traced temperature, or block sizes
        that break the backend's rules (see ``config.py``).

    Example:
      >>> h = jnp.ones((2, 5, 64)); w = jnp.ones((64, 1000)) * 0.01
      >>> y = jnp.zeros((2, 5), jnp.int32)
      >>> logp, ent = token_logprobs(h, w, y, temperature=0.7)  # logp ~ -log(1000)
      >>> grads = jax.grad(lambda h: token_logprobs(h, w, y)[0].sum())(h)
    """
    logp_bt, entropy_bt, _ = token_stats(
        hidden_btd,
        unembed_dv,
        targets_bt,
        temperature=temperature,
        return_entropy=return_entropy,
        block_t=block_t,
        block_v=block_v,
        implementation=implementation,
        interpret=interpret,
    )
    return logp_bt, entropy_bt


def token_stats(
    hidden_btd: jax.Array,
    unembed_dv: jax.Array,
    targets_bt: jax.Array,
    *,
    temperature: float = 1.0,
    return_entropy: bool = True,
    block_t: int | None = None,
    block_v: int | None = None,
    implementation: str | None = None,
    interpret: Any = False,
) -> tuple[jax.Array, jax.Array | None, jax.Array]:
    """``token_logprobs`` plus the log-sum-exp of each row's tempered logits, differentiable.

    What a vocabulary-parallel caller combines across shards (``sharded.py``): with the
    unembedding split by columns, each shard's ``(logp, entropy, lse)`` over its own columns
    (targets outside them count as logit 0, so ``logp + lse`` is the shard's target logit or 0)
    merge into the full distribution's.

    Returns:
      ``(logp_bt, entropy_bt or None, lse_bt)``, float32 ``[B, T]``.
    """
    chex.assert_rank([hidden_btd, unembed_dv, targets_bt], [3, 2, 2])
    chex.assert_equal_shape_prefix([hidden_btd, targets_bt], 2)
    chex.assert_axis_dimension(unembed_dv, 0, hidden_btd.shape[-1])
    if not jnp.issubdtype(targets_bt.dtype, jnp.integer):
        raise ValueError(f"targets_bt must be integer token ids, got {targets_bt.dtype}")
    try:
        temperature = float(temperature)
    except (TypeError, jax.errors.ConcretizationTypeError) as e:
        raise ValueError(
            f"{temperature=} must be a Python float (it is compiled into the kernels)"
        ) from e
    if not temperature > 0:
        raise ValueError(f"{temperature=} must be positive")
    implementation = implementation or default_implementation()
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"{implementation=} must be one of {IMPLEMENTATIONS}")
    if implementation == "naive":
        logp_bt, entropy_bt = token_logprobs_reference(
            hidden_btd,
            unembed_dv,
            targets_bt,
            temperature=temperature,
            return_entropy=return_entropy,
        )
        logits_btv = jnp.einsum(
            "btd,dv->btv",
            hidden_btd.astype(jnp.float32),
            unembed_dv.astype(jnp.float32),
            precision=jax.lax.Precision.HIGHEST,
        )
        return logp_bt, entropy_bt, jax.nn.logsumexp(logits_btv / temperature, axis=-1)

    b, t, d = hidden_btd.shape
    vocab = unembed_dv.shape[1]
    config = default_config(implementation, model_dim=d)
    config = dataclasses.replace(
        config, block_t=block_t or config.block_t, block_v=block_v or config.block_v
    ).fit(implementation, tokens=b * t, vocab=vocab, model_dim=d)
    static = _Static(implementation, config, 1.0 / temperature, return_entropy, interpret)

    dtype = jnp.promote_types(hidden_btd.dtype, unembed_dv.dtype)
    logp_n, ent_n, lse_n = _fused(
        static,
        hidden_btd.reshape(b * t, d).astype(dtype),
        unembed_dv.astype(dtype),
        targets_bt.reshape(b * t).astype(jnp.int32),
    )
    entropy_bt = ent_n.reshape(b, t) if return_entropy else None
    return logp_n.reshape(b, t), entropy_bt, lse_n.reshape(b, t)
