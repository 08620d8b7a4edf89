"""`reshard`: move a pytree of device arrays to new shardings, on device, leaf by leaf.

One function serves train -> decode on one mesh, meshes of different shapes over the same
devices, and moves between device groups (disjoint or overlapping, of any sizes). Three routes,
picked per array:

  same devices, same order   one jitted identity with `out_shardings`: XLA's own collectives
                             (all-gather, all-to-all) on the devices that hold the data.
  one source device          `jax.device_put`: JAX slices on that device, copies device to device.
  other device set           (1) a jitted identity on the source devices to a *transport* layout
                             whose blocks are exactly those some destination device needs,
                             (2) `jax.device_put`, which then only copies whole per-device buffers
                             device to device, (3) if needed a jitted identity on the destination.

A plain `jax.device_put` between two multi-device shardings whose blocks do not match falls back
to gathering the array on the host (`jax._src.array.shard_sharded_device_array_slow_path` in
JAX 0.10); the transport layout exists to avoid exactly that. Everything runs under
`no_host_transfers()`, so any trip through the host raises instead of silently costing time.

Memory: arrays are moved one at a time and, with `donate=True`, each source is deleted as soon as
its copy is ready, so at most one array exists twice. Arrays whose footprint shrinks move first
(largest first), then those that grow, largest first: the peak of live device bytes stays near
max(source, destination) footprint plus the largest array. Cross-process moves between different
device sets are not supported (a process can only copy buffers it addresses); within one device
set, jit works across processes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec, Sharding

logger = logging.getLogger(__name__)

_REPLICA = "_reshard_replica"
_BLOCK = "_reshard_block"


class ReshardStats(NamedTuple):
    """What one `reshard` call did.

    Attributes:
      num_arrays: leaves of the tree.
      num_moved: leaves whose sharding changed (the others are returned as they are).
      bytes: logical bytes of the moved leaves (sum of `nbytes`).
      device_bytes: bytes the moved leaves occupy on their destination devices, every replica
        counted.
      seconds: wall time, including waiting for the last copy.
      peak_live_bytes: with `measure_peak`, the largest sum of `nbytes` over `jax.live_arrays()`
        seen while moving (every live array of the process, not only this tree); else None.
      peak_live_device_bytes: the same counting every replica's bytes on every device; else None.
    """

    num_arrays: int
    num_moved: int
    bytes: int
    device_bytes: int
    seconds: float
    peak_live_bytes: int | None = None
    peak_live_device_bytes: int | None = None


@contextlib.contextmanager
def no_host_transfers() -> Iterator[None]:
    """Within this context any device->host or host->device transfer raises, even an explicit one.

    Device-to-device copies stay allowed. `reshard` runs inside it. On the CPU backend device
    memory is host memory and JAX (0.10) does not check device->host reads there, so on CPU a
    round trip through the host is caught at its host->device half; on GPU and TPU at both.

    Example:
      >>> with no_host_transfers():
      ...     jax.device_put(np.ones(3))  # raises: Disallowed host-to-device transfer
    """
    with (
        jax.transfer_guard_device_to_host("disallow_explicit"),
        jax.transfer_guard_host_to_device("disallow_explicit"),
    ):
        yield


def _shard_bytes(shape, dtype, sharding: Sharding) -> int:
    return math.prod(sharding.shard_shape(tuple(shape))) * np.dtype(dtype).itemsize


def device_bytes(x, sharding: Sharding | None = None) -> int:
    """Bytes `x` occupies (or would, under `sharding`) on this process's devices, replicas counted."""
    sharding = x.sharding if sharding is None else sharding
    return _shard_bytes(x.shape, x.dtype, sharding) * len(sharding.addressable_devices)


def live_bytes() -> tuple[int, int]:
    """(logical, per-device) bytes of every live jax.Array of this process.

    Logical sums `nbytes` of distinct arrays; per-device sums the bytes of distinct device buffers
    (replicas counted). Arrays that only view another's buffers (the per-shard arrays JAX keeps
    after `addressable_shards` or `np.asarray`) are counted once, so it measures memory.
    """
    seen: set[tuple[Any, int]] = set()
    logical = physical = 0
    # Multi-device arrays first, so their single-device shard views are recognised as views.
    arrays = sorted(jax.live_arrays(), key=lambda a: -len(a.sharding.device_set))
    for a in arrays:
        if a.is_deleted():
            continue
        shards = [a] if len(a.sharding.device_set) == 1 else [s.data for s in a.addressable_shards]
        new = {}
        for shard in shards:
            key = (next(iter(shard.devices())), shard.unsafe_buffer_pointer())
            if key not in seen:
                new[key] = shard.nbytes
        if not new:
            continue
        seen.update(new)
        logical += a.nbytes
        physical += sum(new.values())
    return logical, physical


def _device_order(sharding: Sharding) -> tuple:
    if isinstance(sharding, NamedSharding):
        return tuple(sharding.mesh.devices.flat)
    assignment = getattr(sharding, "_device_assignment", None)
    if assignment is not None:
        return tuple(assignment)
    return tuple(sorted(sharding.device_set, key=lambda d: d.id))


def _identity(x):
    return x


@functools.lru_cache(maxsize=1024)  # one compiled move per destination layout
def _jit_to(dst: Sharding):
    return jax.jit(_identity, out_shardings=dst)


def _auto_mesh(devices, shape, names) -> Mesh:
    return Mesh(
        np.asarray(devices, dtype=object).reshape(shape),
        names,
        axis_types=(AxisType.Auto,) * len(shape),
    )


def _transport(x: jax.Array, dst: Sharding) -> tuple[NamedSharding, Sharding]:
    """(layout on the source devices, layout on the destination devices) with matching blocks."""
    src_devices, dst_devices = _device_order(x.sharding), _device_order(dst)
    n_src, n_dst = len(src_devices), len(dst_devices)
    if isinstance(dst, NamedSharding) and n_src % n_dst == 0:
        # The destination layout itself, on the source devices, each block held n_src/n_dst times.
        mesh = dst.mesh
        src_mesh = _auto_mesh(
            src_devices, (*mesh.devices.shape, n_src // n_dst), (*mesh.axis_names, _REPLICA)
        )
        return NamedSharding(src_mesh, dst.spec), dst
    # Otherwise: k equal blocks of one dimension, k dividing both device counts (k = 1 replicates).
    k, best = 1, None
    for candidate in range(math.gcd(n_src, n_dst), 1, -1):
        if math.gcd(n_src, n_dst) % candidate:
            continue
        dims = [d for d in range(x.ndim) if x.shape[d] % candidate == 0]
        if dims:
            k, best = candidate, max(dims, key=lambda d: x.shape[d])
            break
    spec = [None] * x.ndim
    if best is not None:
        spec[best] = _BLOCK
    names = (_BLOCK, _REPLICA)
    return (
        NamedSharding(_auto_mesh(src_devices, (k, n_src // k), names), PartitionSpec(*spec)),
        NamedSharding(_auto_mesh(dst_devices, (k, n_dst // k), names), PartitionSpec(*spec)),
    )


def same_layout(x, dst: Sharding) -> bool:
    """Whether `x` (an array or a `jax.ShapeDtypeStruct` with a sharding) is already laid out
    as `dst`: an equivalent sharding on the same devices in the same order (`reshard` returns
    such an array as it is)."""
    return _device_order(x.sharding) == _device_order(dst) and x.sharding.is_equivalent_to(
        dst, x.ndim
    )


class MoveRoute(NamedTuple):
    """The steps `reshard` takes to move one array (see the module docstring); the planner
    compiles the same steps (`jaxrl_llm.scale.weight_sync`).

    Attributes:
      before: a jitted identity to this layout on the source devices (same devices: the
        destination itself; other devices: the transport layout), or None.
      copy: other devices: the layout `jax.device_put` copies into, device to device; else None.
      after: a jitted identity to the destination on the destination devices, or None.
    """

    before: Sharding | None
    copy: Sharding | None
    after: Sharding | None


def move_route(x, dst: Sharding) -> MoveRoute:
    """The `MoveRoute` of `x` (a `jax.Array`, or a `jax.ShapeDtypeStruct` with a sharding) to
    `dst`, for an array not yet laid out as `dst`."""
    if _device_order(x.sharding) == _device_order(dst):
        return MoveRoute(dst, None, None)
    if len(x.sharding.device_set) == 1:  # JAX slices on the source device
        return MoveRoute(None, dst, None)
    t_src, t_dst = _transport(x, dst)
    before = None if same_layout(x, t_src) else t_src
    return MoveRoute(before, t_dst, None if t_dst is dst else dst)


def _private(x: jax.Array, dst: Sharding) -> jax.Array:
    """`x`, or an on-device copy of it when `jax.device_put(x, dst)` could reuse its buffers.

    `device_put` hands a source buffer that already sits on a destination device straight to the
    result (even with `may_alias=False` on its slicing and block-matching routes), so deleting a
    donated `x` afterwards would delete part of the result. The copy is ours to lose.
    """
    if x.sharding.device_set & dst.device_set:
        return jnp.copy(x)
    return x


def _move(x: jax.Array, dst: Sharding, sample) -> jax.Array:
    """A copy of `x` laid out as `dst`, never through the host; shares no buffer with `x`."""
    route = move_route(x, dst)
    if route.copy is None:
        # Fresh outputs: the layouts differ, so jit cannot forward `x` itself.
        return _jit_to(route.before)(x).block_until_ready()
    if not (x.is_fully_addressable and dst.is_fully_addressable):
        raise NotImplementedError(
            "reshard between different device sets needs every device addressable by this "
            f"process; got {x.sharding} -> {dst}. Across processes, reshard within one device set."
        )
    if route.before is None:
        mid = _private(x, route.copy)
    else:
        mid = _jit_to(route.before)(x).block_until_ready()
    sample()
    # Each block of `route.copy` now sits whole on some source device: a device-to-device copy.
    moved = jax.device_put(mid, route.copy, may_alias=False).block_until_ready()
    sample()
    del mid
    if route.after is None:
        return moved
    return _jit_to(route.after)(moved).block_until_ready()


def _expand_shardings(dst_shardings: Any, tree: Any, num_leaves: int) -> list[Sharding]:
    """One sharding per leaf of `tree`; `dst_shardings` may be a tree prefix (e.g. a State of
    NamedSharding for a State of Variables) or a single Sharding."""
    if isinstance(dst_shardings, Sharding):
        return [dst_shardings] * num_leaves
    s_leaves, s_def = jax.tree.flatten(dst_shardings, is_leaf=lambda s: isinstance(s, Sharding))
    try:
        subtrees = s_def.flatten_up_to(tree)
    except (ValueError, TypeError) as e:
        raise ValueError(
            "reshard: dst_shardings must have the structure of the tree (or be a prefix of it); "
            f"{e}"
        ) from e
    out: list[Sharding] = []
    for sharding, subtree in zip(s_leaves, subtrees, strict=True):
        if not isinstance(sharding, Sharding):
            raise TypeError(f"reshard: expected a jax.sharding.Sharding, got {sharding!r}.")
        out += [sharding] * len(jax.tree.leaves(subtree))
    return out


def reshard(
    tree: Any,
    dst_shardings: Any,
    *,
    donate: bool,
    measure_peak: bool = False,
) -> tuple[Any, ReshardStats]:
    """Moves every array of `tree` to its destination sharding without leaving the devices.

    Args:
      tree: a pytree of `jax.Array` (an `nnx.State`, a dict of arrays, an optax state, a KVCache).
      dst_shardings: a matching pytree of `jax.sharding.Sharding`, a prefix of it (a State of
        NamedSharding from `param_shardings` for a State of Variables), or one Sharding for all.
      donate: delete each source array as soon as its copy is ready (the caller's arrays become
        unusable). Arrays already laid out as asked (an equivalent sharding on the same devices
        in the same order) are returned as they are, never deleted.
      measure_peak: sample `jax.live_arrays()` while moving (costs a little per array).

    Returns:
      (the tree with the same structure on the new shardings, `ReshardStats`).

    Raises:
      TypeError: a leaf is not a jax.Array (host data must be placed with `jax.device_put`).
      NotImplementedError: a move between different device sets of arrays not all addressable.
      jax.errors.JaxRuntimeError: something tried to go through the host.

    Example:
      >>> train = param_shardings(model, mesh, TRAIN_RULES)
      >>> decode = param_shardings(model, mesh, DECODE_RULES)
      >>> state, stats = reshard(nnx.state(model), decode, donate=True)
      >>> print(f"{stats.bytes / 2**20:.0f} MiB in {stats.seconds:.3f} s")
    """
    start = time.perf_counter()
    leaves, treedef = jax.tree.flatten(tree)
    dsts = _expand_shardings(dst_shardings, tree, len(leaves))
    for leaf in leaves:
        if not isinstance(leaf, jax.Array):
            raise TypeError(
                f"reshard moves device arrays; got {type(leaf).__name__}. Place host data with "
                "jax.device_put first."
            )
    peak = [0, 0]

    def sample():
        if measure_peak:
            logical, physical = live_bytes()
            peak[0], peak[1] = max(peak[0], logical), max(peak[1], physical)

    def order_key(i):
        src, dst = device_bytes(leaves[i]), device_bytes(leaves[i], dsts[i])
        return (dst > src, -abs(dst - src) if dst < src else -src)

    sample()
    results: list[jax.Array | None] = [None] * len(leaves)
    done: dict[tuple[int, Sharding], jax.Array] = {}
    moved_bytes = moved_device_bytes = num_moved = 0
    with no_host_transfers():
        for i in sorted(range(len(leaves)), key=order_key):
            x, dst = leaves[i], dsts[i]
            key = (id(x), dst)
            if key in done:  # the same array twice in the tree
                results[i] = done[key]
                continue
            if same_layout(x, dst):
                results[i] = done[key] = x
                continue
            out = _move(x, dst, sample)
            sample()
            num_moved += 1
            moved_bytes += x.nbytes
            moved_device_bytes += device_bytes(out)
            if donate:
                x.delete()
            results[i] = done[key] = out
            del x, out
    del done
    sample()
    stats = ReshardStats(
        num_arrays=len(leaves),
        num_moved=num_moved,
        bytes=moved_bytes,
        device_bytes=moved_device_bytes,
        seconds=time.perf_counter() - start,
        peak_live_bytes=peak[0] if measure_peak else None,
        peak_live_device_bytes=peak[1] if measure_peak else None,
    )
    logger.info(
        "reshard: %d of %d arrays, %.1f MiB (%.1f MiB on devices) in %.3f s",
        num_moved,
        len(leaves),
        moved_bytes / 2**20,
        moved_device_bytes / 2**20,
        stats.seconds,
    )
    return jax.tree.unflatten(treedef, results), stats
