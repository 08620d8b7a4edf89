"""The `Layout` a role traces its programs under: its mesh, its rule set, that rule set with the
FSDP split gathered (what a layer computes with), and the attention kernel of the mesh's
platform. See `jaxrl_llm.models.partitioning`."""

from __future__ import annotations

import functools

from jax.sharding import Mesh

from jaxrl_llm.models.partitioning import Layout
from jaxrl_llm.sharding.rules import Rules, logical_to_pspec

# Logical names whose split is FSDP (gathered before a weight is used), not tensor parallelism.
FSDP_NAMES = ("embed",)


def gathered_rules(rules: Rules) -> Rules:
    """`rules` with every FSDP name replicated: TRAIN_RULES -> the decode (TP-only) layout."""
    return tuple((name, None if name in FSDP_NAMES else target) for name, target in rules)


@functools.lru_cache(maxsize=64)
def layout(mesh: Mesh, rules: Rules) -> Layout:
    """The `Layout` of `rules` on `mesh`, for `jaxrl_llm.models.partitioning.use_layout`.

    Example:
      >>> with use_layout(layout(mesh, TRAIN_RULES)):
      ...     lowered = step.lower(state, batch)
    """
    gathered = gathered_rules(rules)
    platform = mesh.devices.flat[0].platform
    return Layout(
        mesh=mesh,
        stored=lambda axes, shape: logical_to_pspec(axes, rules, mesh, shape),
        gathered=lambda axes, shape: logical_to_pspec(axes, gathered, mesh, shape),
        # TPU meshes run cache-free attention through the Pallas splash kernel.
        attention="splash" if platform == "tpu" else None,
    )
