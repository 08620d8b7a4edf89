"""The KV cache of every decoder: one allocator, its layouts, and the row moves on it.

Every decode path (the single-batch `Generator`, `ContinuousGenerator`, `SlotDecoder`,
`EpisodeDecoder`) gets its cache from `allocate` (outside a program: zeros created directly in
their sharded layout, never on one device first) or `allocate_in_program` (inside a jitted
program), so a cache change (a ring buffer for local layers, a paged layout for the accelerator
kernels) is made here once. A cache is `KVCache`: per layer [B, K, S, H] keys and values (B rows,
K KV heads, S slots: slot s holds position s, H head width); `KV_CACHE_LOGICAL_AXES` name the
dimensions for the rule sets.

Layouts: `CacheLayout(mesh, rules)` resolves the logical axes per shape (so one layout serves
every bucket); `resolve` also accepts one Sharding, a `KVCache` of shardings or a callable.
`row_shards` says over how many devices the rows are split, which the compacting decode needs to
keep its row moves on each device (`decode_state.compact`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_llm.models.transformer import KV_CACHE_LOGICAL_AXES, KVCache, Transformer

Array = jax.Array


class CacheLayout(NamedTuple):
    """Shard the KV cache by a logical-axis rule set: `jaxrl_llm.sharding.cache_shardings`.

    Resolved inside the program for the padded cache shape, so one layout fits every bucket
    (a cache batch the "data" axis does not divide is replicated instead). Hashable.

    Example:
      >>> Generator(model, config, cache_shardings=CacheLayout(mesh, DECODE_RULES))
    """

    mesh: jax.sharding.Mesh
    rules: tuple


def resolve(cache: KVCache, shardings):
    """A `KVCache` of shardings for `cache` (arrays or shapes) from any accepted form, or None.

    Accepts None, a `CacheLayout`, one `jax.sharding.Sharding` for every array, a `KVCache` of
    shardings, or a callable `cache -> shardings`.
    """
    if shardings is None:
        return None
    if isinstance(shardings, CacheLayout):
        from jaxrl_llm.sharding import cache_shardings  # sharding depends on models only

        return cache_shardings(cache, shardings.mesh, shardings.rules)
    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda _: shardings, cache)
    if callable(shardings):
        return shardings(cache)
    return shardings


def constrain(cache: KVCache, shardings) -> KVCache:
    """`cache` with a sharding constraint from `shardings` (any form of `resolve`; None: as
    it is). Inside a program."""
    resolved = resolve(cache, shardings)
    return cache if resolved is None else jax.lax.with_sharding_constraint(cache, resolved)


def _zeros(model: Transformer, batch: int, length: int, dtype) -> KVCache:
    return model.init_cache(batch, length, dtype=dtype)


def allocate_in_program(
    model: Transformer, batch: int, length: int, *, dtype=None, shardings=None
) -> KVCache:
    """A zero cache of `batch` rows and `length` slots inside a jitted program, laid out by
    `shardings` (any form of `resolve`)."""
    return constrain(_zeros(model, batch, length, dtype), shardings)


def allocate(model: Transformer, batch: int, length: int, *, dtype=None, shardings=None) -> KVCache:
    """A zero cache of `batch` rows and `length` slots, created by a jitted program directly in
    the layout of `shardings` (each device writes only its own shards).

    Example:
      >>> cache = allocate(model, 8, 512, shardings=CacheLayout(mesh, DECODE_RULES))
    """
    abstract = jax.eval_shape(lambda: _zeros(model, batch, length, dtype))
    resolved = resolve(abstract, shardings)
    build = jax.jit(lambda: _zeros(model, batch, length, dtype), out_shardings=resolved)
    return build()


def extend(cache: KVCache, extra_slots: int) -> KVCache:
    """Appends `extra_slots` zero slots along the cache's sequence axis."""
    if extra_slots <= 0:
        return cache
    axis = KV_CACHE_LOGICAL_AXES.index("cache_sequence")

    def pad(x):
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, extra_slots)
        return jnp.pad(x, widths)

    return jax.tree.map(pad, cache)


def take_rows(tree: Any, index_b: Array) -> Any:
    """Rows `index_b` of every array in `tree` (axis 0)."""
    return jax.tree.map(lambda x: jnp.take(x, index_b, axis=0), tree)


def take_rows_per_shard(tree: Any, index_dk: Array) -> Any:
    """Rows of every array in `tree` chosen within each of d row shards: `index_dk[i]` are
    indices into shard i's rows (axis 0 of each array is d shards of B / d rows), and the result
    has d * k rows, shard i's first. Each device gathers from its own rows only (a batched
    gather over the shard axis); a plain `take_rows` with arbitrary indices made XLA gather the
    whole sharded cache on every device (docs/scale.md)."""
    shards, keep = index_dk.shape

    def one(x):
        local = x.reshape(shards, x.shape[0] // shards, *x.shape[1:])
        index = index_dk.reshape(shards, keep, *((1,) * (x.ndim - 1)))
        picked = jnp.take_along_axis(local, index, axis=1)
        return picked.reshape(shards * keep, *x.shape[1:])

    return jax.tree.map(one, tree)


def row_shards(shardings, batch: int) -> int:
    """Over how many devices a `CacheLayout` splits `batch` cache rows (1 for another form)."""
    if not isinstance(shardings, CacheLayout):
        return 1
    from jaxrl_llm.sharding import logical_to_pspec

    entry = logical_to_pspec(("cache_batch",), shardings.rules, shardings.mesh, (batch,))[0]
    if entry is None:
        return 1
    axes = (entry,) if isinstance(entry, str) else tuple(entry)
    return math.prod(shardings.mesh.shape[a] for a in axes)
