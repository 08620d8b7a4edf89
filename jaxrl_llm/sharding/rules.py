"""Logical-axis rule sets: the one table from the model's axis names to mesh axes.

Every parameter of the model names its dimensions (`vocab`, `embed`, `heads`, `kv_heads`,
`head_dim`, `mlp`, `norm`; see `jaxrl_llm.models.layers`), and the KV cache names its own
(`cache_batch`, `cache_sequence`, `kv_heads`, `head_dim`). A *rule set* maps those logical names to
mesh axes, MaxText style: a tuple of `(logical_name, target)` pairs where `target` is a mesh axis
name, a tuple of mesh axis names (the dimension is split over their product), or None (replicated).

Resolution of one dimension, `logical_to_pspec`:
  1. The candidates are the rules whose name matches, in order; a name may appear several times
     (fallbacks, e.g. `("embed", ("data", "model"))` then `("embed", "data")`). A name with no rule
     at all is an error: add `(name, None)` to replicate it on purpose.
  2. A candidate is skipped when one of its mesh axes is absent from the mesh, is already used by
     an earlier dimension of the same array (a mesh axis can shard one dimension only), or when
     the product of its mesh axis sizes does not divide the dimension.
  3. The first candidate that survives wins; if none does (or the winner is None) the dimension
     is replicated.
So SmolLM2's 9 query heads and 3 KV heads replicate on a model axis of 2 or 4 (and shard on 3),
while its MLP (1536) and vocabulary (49152) shard; on a mesh without a "data" axis the train set
degrades to pure tensor parallelism. Checks 2 need `mesh` and `shape`; without them a rule is
taken as written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from jax.sharding import Mesh, NamedSharding, PartitionSpec

# A rule maps a logical axis name to a mesh axis, a tuple of mesh axes, or None (replicate).
Rule = tuple[str, str | tuple[str, ...] | None]
Rules = tuple[Rule, ...]

# Training layout: FSDP (ZeRO-3) over "data" on the residual width of every weight, tensor
# parallelism over "model" on heads, KV heads, MLP and vocabulary (Megatron column/row split).
# Each device holds 1 / (data * model) of a weight whose dimensions divide; XLA all-gathers the
# "data" shards inside the jitted step. Activations and the cache are split over "data" by batch.
TRAIN_RULES: Rules = (
    ("batch", "data"),
    ("sequence", None),
    ("vocab", "model"),
    ("embed", "data"),
    ("heads", "model"),
    ("kv_heads", "model"),
    ("head_dim", None),
    ("mlp", "model"),
    ("norm", None),
    ("cache_batch", "data"),
    ("cache_sequence", None),
)

# Decoding layout: tensor parallelism over "model" only; weights are not FSDP-sharded (every
# "data" group holds a full tensor-parallel replica, so a decode step needs no weight gather).
# Sequences (batch and KV cache rows) are split over "data".
#
# On the same mesh, each device's train shard of a weight is a slice of its decode shard (the
# "model" split is the same, only "embed" is gathered over "data"): the HybridFlow condition for
# resharding without keeping a second copy of the weights (arXiv:2409.19256).
DECODE_RULES: Rules = (
    ("batch", "data"),
    ("sequence", None),
    ("vocab", "model"),
    ("embed", None),
    ("heads", "model"),
    ("kv_heads", "model"),
    ("head_dim", None),
    ("mlp", "model"),
    ("norm", None),
    ("cache_batch", "data"),
    ("cache_sequence", None),
)


def _as_axes(target) -> tuple[str, ...]:
    return (target,) if isinstance(target, str) else tuple(target)


def _resolve(
    name: str | None,
    dim: int | None,
    rules: Rules,
    mesh: Mesh | None,
    used: set[str],
):
    """The mesh target of one dimension, or None; see the module docstring."""
    if name is None:
        return None
    candidates = [target for rule_name, target in rules if rule_name == name]
    if not candidates:
        known = sorted({rule_name for rule_name, _ in rules})
        raise KeyError(
            f"logical axis {name!r} has no rule; known names: {known}. "
            f"Add ({name!r}, None) to replicate it or ({name!r}, '<mesh axis>') to shard it."
        )
    for target in candidates:
        if target is None:
            return None
        axes = _as_axes(target)
        if any(axis in used for axis in axes):
            continue
        if mesh is not None:
            if any(axis not in mesh.shape for axis in axes):
                continue
            if dim is not None and dim % math.prod(mesh.shape[axis] for axis in axes):
                continue
        return target
    return None


def logical_to_pspec(
    logical_axes: Sequence[str | None],
    rules: Rules,
    mesh: Mesh | None = None,
    shape: Sequence[int] | None = None,
) -> PartitionSpec:
    """The PartitionSpec of an array whose dimensions carry `logical_axes`.

    Args:
      logical_axes: one logical name (or None for an unnamed, replicated dimension) per dimension.
      rules: a rule set such as `TRAIN_RULES`.
      mesh: when given, rules naming a mesh axis absent from it are skipped.
      shape: the array's shape; with `mesh`, rules whose mesh size does not divide the dimension
        are skipped (the dimension replicates).

    Returns:
      A PartitionSpec with one entry per dimension.

    Raises:
      KeyError: a logical name has no rule.
      ValueError: `shape` and `logical_axes` disagree in rank.

    Example:
      >>> logical_to_pspec(("embed", "heads", "head_dim"), TRAIN_RULES)
      P('data', 'model', None)
      >>> mesh = make_mesh((2, 4), ("data", "model"))
      >>> logical_to_pspec(("embed", "heads", "head_dim"), TRAIN_RULES, mesh, (576, 9, 64))
      P('data', None, None)
    """
    logical_axes = tuple(logical_axes)
    if shape is not None and len(shape) != len(logical_axes):
        raise ValueError(f"shape {tuple(shape)} has rank {len(shape)}; {logical_axes=} does not.")
    used: set[str] = set()
    spec = []
    for i, name in enumerate(logical_axes):
        target = _resolve(name, None if shape is None else shape[i], rules, mesh, used)
        if target is not None:
            used.update(_as_axes(target))
        spec.append(target)
    return PartitionSpec(*spec)


def logical_to_sharding(
    logical_axes: Sequence[str | None],
    rules: Rules,
    mesh: Mesh,
    shape: Sequence[int] | None = None,
) -> NamedSharding:
    """`NamedSharding(mesh, logical_to_pspec(logical_axes, rules, mesh, shape))`."""
    return NamedSharding(mesh, logical_to_pspec(logical_axes, rules, mesh, shape))
