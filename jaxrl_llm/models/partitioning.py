"""Layout hints inside the model, for programs traced with a mesh and a rule set in scope.

The model carries no mesh: its parameters name their axes (`logical_axes` metadata) and
`jaxrl_llm.sharding` resolves them. A few places inside the forward still need the layout at
trace time, and read it from `current_layout()`, set by the role that traces the program
(`with use_layout(sharding.layout(mesh, TRAIN_RULES)): step.lower(...)`):

  - the layer scan (`Transformer.hidden_states`) keeps the stacked weights in their stored
    (FSDP) layout and gathers each layer's weights inside the loop body (`gathered`), so one
    layer's full weights are live at a time, not every layer's (ZeRO-3 / FSDP; without the
    hint XLA:TPU gathered all layers before the loop, measured in docs/scale.md);
  - the fused log-prob kernel runs vocabulary-parallel under `shard_map` when the unembedding
    is split over a mesh axis (`kernels.logprobs.token_logprobs_sharded`), instead of
    all-gathering the [D, V] matrix in every vocabulary block;
  - with `Layout.attention == "splash"` (TPU meshes), the cache-free attention of the train
    step and the forwards runs JAX's Pallas splash kernel (`kernels.attention`) under
    `shard_map` (rows over the batch axes, heads over the model axis) instead of the XLA path
    that writes the [T, T] scores to HBM.

Without a layout in scope (one device, tests, notebooks) every hint is a no-op. The resolvers
come from `jaxrl_llm.sharding` (which depends on this package, not the reverse).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

# (logical axes, shape) -> PartitionSpec
Resolver = Callable[[Sequence[str | None], Sequence[int]], PartitionSpec]


class Layout(NamedTuple):
    """How arrays are laid out in the program being traced.

    Attributes:
      mesh: the mesh.
      stored: resolves logical axes to the stored parameter layout (e.g. FSDP x TP).
      gathered: resolves them to the layout a layer computes with (FSDP gathered, TP kept).
      attention: "splash" to run cache-free attention through the Pallas TPU kernel, None for
        the XLA path.
      interpret: run kernels in Pallas' interpreter (CPU tests of the TPU path).
    """

    mesh: Mesh
    stored: Resolver
    gathered: Resolver
    attention: str | None = None
    interpret: bool = False

    def mesh_axes(self, logical_name: str, dim: int) -> tuple[str, ...]:
        """The mesh axes a dimension named `logical_name` of size `dim` is split over in the
        gathered layout (() when replicated)."""
        entry = self.gathered((logical_name,), (dim,))[0]
        if entry is None:
            return ()
        return (entry,) if isinstance(entry, str) else tuple(entry)


_CURRENT: contextvars.ContextVar[Layout | None] = contextvars.ContextVar(
    "jaxrl_llm_layout", default=None
)


@contextlib.contextmanager
def use_layout(layout: Layout | None) -> Iterator[None]:
    """Makes `layout` the current one while tracing inside the block (None: no hints)."""
    token = _CURRENT.set(layout)
    try:
        yield
    finally:
        _CURRENT.reset(token)


_LAYOUT_KERNELS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxrl_llm_layout_kernels", default=True
)


@contextlib.contextmanager
def layout_kernels(enabled: bool) -> Iterator[None]:
    """Inside the block, programs traced under a layout keep (True, the default) or drop
    (False) the kernels the layout's devices would pick: splash attention on TPU layouts and
    the Pallas log-prob kernel of the mesh's platform (`training.logprobs`); the XLA paths
    then run, as on CPU. For comparing a program's memory and time with and without the
    kernels (docs/scale.md)."""
    token = _LAYOUT_KERNELS.set(bool(enabled))
    try:
        yield
    finally:
        _LAYOUT_KERNELS.reset(token)


def layout_kernels_enabled() -> bool:
    """Whether `layout_kernels` leaves the layout's kernels on in this context."""
    return _LAYOUT_KERNELS.get()


def current_layout() -> Layout | None:
    """The layout set by the innermost `use_layout`, or None."""
    layout = _CURRENT.get()
    if layout is None or layout.mesh.devices.size <= 1:
        return None
    return layout


def _is_variable(x) -> bool:
    return isinstance(x, nnx.Variable)


def constrain_params(state, *, gathered: bool, leading_axes: int = 0):
    """Sharding constraints on every Variable of `state` from its `logical_axes` metadata.

    Args:
      state: an `nnx.State` of Variables (a layer's, or the stack of all layers').
      gathered: constrain to the computing layout (True) or the stored one (False).
      leading_axes: extra leading dimensions without a logical name (1 for stacked layers),
        left replicated.

    Returns:
      `state` unchanged without a current layout; else the same tree with constrained values.
    """
    layout = current_layout()
    if layout is None:
        return state
    resolve = layout.gathered if gathered else layout.stored

    def one(variable):
        axes = variable.get_metadata().get("logical_axes")
        value = variable.get_value()
        if axes is None:
            spec = PartitionSpec()
        else:
            inner = resolve(tuple(axes), value.shape[leading_axes:])
            spec = PartitionSpec(*((None,) * leading_axes), *inner)
        sharding = NamedSharding(layout.mesh, spec)
        return variable.replace(jax.lax.with_sharding_constraint(value, sharding))

    return jax.tree.map(one, state, is_leaf=_is_variable)


def constrain(x: jax.Array, logical_axes: Sequence[str | None]) -> jax.Array:
    """`x` constrained to the gathered layout of its logical axes (no-op without a layout),
    e.g. activations [B, T, D] with ("batch", None, None)."""
    layout = current_layout()
    if layout is None:
        return x
    spec = layout.gathered(tuple(logical_axes), x.shape)
    return jax.lax.with_sharding_constraint(x, NamedSharding(layout.mesh, spec))


# Whether the current forward's positions count 0, 1, ... within each row or packed segment (the
# kernels' masks are by index); set by `Transformer.hidden_states`.
_INDEX_POSITIONS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxrl_llm_index_positions", default=False
)


@contextlib.contextmanager
def index_positions(enabled: bool) -> Iterator[None]:
    """Marks the forward traced inside as having index positions (see `kernel_attention`)."""
    token = _INDEX_POSITIONS.set(enabled)
    try:
        yield
    finally:
        _INDEX_POSITIONS.reset(token)


def kernel_attention(
    q_btnh: jax.Array,
    k_btkh: jax.Array,
    v_btkh: jax.Array,
    segment_ids_bt: jax.Array | None,
    window: jax.Array | None,
    *,
    scale: float,
    sliding_window: int | None,
) -> jax.Array | None:
    """Causal self-attention [B, T, N, H] through the layout's kernel, or None when the XLA path
    must run (no kernel in the layout, positions that are not indices, a length the kernel
    cannot tile).

    `window` is the layer's window (a traced scalar inside the layer scan: global layers carry
    one larger than any distance, local ones `sliding_window`); both kernels are compiled and
    `lax.cond` picks per layer.
    """
    layout = current_layout()
    if layout is None or layout.attention != "splash" or not _INDEX_POSITIONS.get():
        return None
    if not _LAYOUT_KERNELS.get():
        return None
    from kernels.attention import causal_attention, supported

    b, t, n, _ = q_btnh.shape
    k = k_btkh.shape[2]
    if not supported(t):
        return None
    batch = layout.mesh_axes("batch", b)
    heads, kv_heads = layout.mesh_axes("heads", n), layout.mesh_axes("kv_heads", k)
    if heads != kv_heads:  # groups must stay whole on a shard: replicate both
        heads = ()
    options = dict(scale=scale, interpret=layout.interpret)

    def local(q, kk, v, segments, window_):
        full = lambda: causal_attention(q, kk, v, segments, **options)
        if window_ is None or sliding_window is None:
            return full()
        windowed = lambda: causal_attention(q, kk, v, segments, window=sliding_window, **options)
        return jax.lax.cond(window_ > sliding_window, full, windowed)

    rows = PartitionSpec(batch or None, None, heads or None, None)
    segment_spec = None if segment_ids_bt is None else PartitionSpec(batch or None, None)
    window_spec = None if window is None else PartitionSpec()
    return jax.shard_map(
        local,
        mesh=layout.mesh,
        in_specs=(rows, rows, rows, segment_spec, window_spec),
        out_specs=rows,
        check_vma=False,
    )(q_btnh, k_btkh, v_btkh, segment_ids_bt, window)
