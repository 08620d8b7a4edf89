"""Checkpoints with orbax: the train state (params, optimizer state, step) plus JSON metadata.

The metadata holds what makes a resumed run continue exactly: the RL step, the data position,
the seed, and the evaluation done so far. A checkpoint that cannot be read is reported with its
directory, and the previous one is used instead (nothing is deleted).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)


class CorruptCheckpointError(RuntimeError):
    """No checkpoint in the directory could be restored."""


class Checkpointer:
    """Saves and restores `(train_state, metadata)` pairs under `directory/<step>`.

    Args:
      directory: where step folders are written (created).
      max_to_keep: how many recent checkpoints to keep.

    Example:
      >>> ckpt = Checkpointer(workdir + "/checkpoints")
      >>> ckpt.save(10, state, {"data_position": 80})
      >>> state, meta = ckpt.restore_latest(abstract_state)
    """

    def __init__(self, directory: str, *, max_to_keep: int = 3):
        self.directory = os.path.abspath(directory)
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
        )

    def save(self, step: int, train_state: Any, metadata: dict[str, Any]) -> None:
        """Writes checkpoint `step` and waits until it is on disk."""
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(train_state), metadata=ocp.args.JsonSave(metadata)
            ),
            force=True,
        )
        self.manager.wait_until_finished()

    def all_steps(self) -> list[int]:
        """Steps with a checkpoint, ascending."""
        self.manager.reload()
        return sorted(self.manager.all_steps())

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict[str, Any]]:
        """Restores checkpoint `step` into arrays shaped (and sharded) like `abstract_state`."""
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state), metadata=ocp.args.JsonRestore()
            ),
        )
        return restored.state, dict(restored.metadata)

    def restore_latest(self, abstract_state: Any) -> tuple[Any, dict[str, Any]] | None:
        """The newest checkpoint that restores, or None when there is none.

        Raises:
          CorruptCheckpointError: checkpoints exist but none can be read.
        """
        steps = self.all_steps()
        errors = []
        for step in reversed(steps):
            try:
                return self.restore(step, abstract_state)
            except Exception as e:  # orbax raises many types for truncated or foreign files
                path = os.path.join(self.directory, str(step))
                log.warning(
                    "Checkpoint %s cannot be restored (%s: %s); trying an older one.",
                    path,
                    type(e).__name__,
                    e,
                )
                errors.append(f"{path}: {type(e).__name__}: {e}")
        if errors:
            raise CorruptCheckpointError(
                "No checkpoint could be restored:\n  " + "\n  ".join(errors) + "\nMove the broken "
                "step folders aside to start from scratch, or point --workdir elsewhere."
            )
        return None

    def close(self) -> None:
        """Waits for pending writes and releases the manager."""
        self.manager.wait_until_finished()
        self.manager.close()


def abstract_like(tree: Any) -> Any:
    """`jax.ShapeDtypeStruct`s (with shardings) of a pytree of arrays, a restore target."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        tree,
    )
