"""Which attention the decode step's one query per row runs over the KV cache.

The decode loop (`jaxrl_llm.rollout.decode_state.decode_until`) traces its step inside
`use(DecodeKernel(...))`, with the implementation the engine chose
(`GenerationConfig.decode_attention`); every layer's one-query attention (`layers.Attention`)
calls `attend`, which runs it through `kernels.decode_attention`. Without a choice in scope
(prefill, the other decode loops, tests) the XLA path runs: the masked full-cache attention.

Under a mesh a Pallas kernel runs under `shard_map`: each device attends with its own rows and
KV heads of the cache, in the layout the decode rule set gives the cache
(`DecodeKernel.cache_spec`); the automatic partitioner cannot split a Pallas call and would
gather the whole cache onto every device.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import jax
from jax.sharding import Mesh, PartitionSpec

from kernels.decode_attention import decode_attention

__all__ = ["DecodeKernel", "attend", "use"]


class DecodeKernel(NamedTuple):
    """The decode attention of the program being traced.

    Attributes:
      implementation: a `kernels.decode_attention.IMPLEMENTATIONS` name.
      interpret: run the kernel in Pallas' interpreter (a Pallas backend chosen on a CPU).
      mesh: the mesh the cache is split over (None: one device).
      cache_spec: the PartitionSpec of a cache array of a given shape [B, K, S, H] on `mesh`.
    """

    implementation: str
    interpret: bool = False
    mesh: Mesh | None = None
    cache_spec: Callable[[Sequence[int]], PartitionSpec] | None = None


_CURRENT: contextvars.ContextVar[DecodeKernel | None] = contextvars.ContextVar(
    "jaxrl_llm_decode_kernel", default=None
)


@contextlib.contextmanager
def use(kernel: DecodeKernel | None) -> Iterator[None]:
    """Makes `kernel` the decode attention of programs traced inside the block (None: XLA)."""
    token = _CURRENT.set(kernel)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def attend(
    q_bnh: jax.Array,
    k_bksh: jax.Array,
    v_bksh: jax.Array,
    position_b: jax.Array,
    *,
    window: jax.Array | None,
    score_divisor: float,
) -> jax.Array:
    """One query per row [B, N, H] at `position_b` [B] (its slot, already written) over the
    cache [B, K, S, H]: slots 0..position_b are visible (with a `window` W, the last W of
    them). Returns [B, N, H] in the dtype of `q_bnh`."""
    kernel = _CURRENT.get() or DecodeKernel("xla")
    lengths_b = position_b + 1
    run = lambda q, k, v, lengths, window_: decode_attention(
        q, k, v, lengths, window=window_, score_divisor=score_divisor,
        implementation=kernel.implementation, interpret=kernel.interpret,
    )  # fmt: skip
    if kernel.implementation == "xla" or kernel.mesh is None or kernel.mesh.devices.size == 1:
        return run(q_bnh, k_bksh, v_bksh, lengths_b, window)
    rows, heads, sequence, head_dim = kernel.cache_spec(k_bksh.shape)
    if sequence is not None or head_dim is not None:
        raise ValueError(
            f"the decode attention kernel needs each row's slots on one device; the cache "
            f"layout splits them: {kernel.cache_spec(k_bksh.shape)}"
        )
    cache = PartitionSpec(rows, heads, None, None)
    queries = PartitionSpec(rows, heads, None)  # a KV head's query heads stay with it
    return jax.shard_map(
        run,
        mesh=kernel.mesh,
        in_specs=(
            queries,
            cache,
            cache,
            PartitionSpec(rows),
            None if window is None else PartitionSpec(),
        ),
        out_specs=queries,
        check_vma=False,
    )(q_bnh, k_bksh, v_bksh, lengths_b, window)
