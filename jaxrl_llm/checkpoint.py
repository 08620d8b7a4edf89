"""Checkpoints with orbax: the train state (params, optimizer state, step) plus JSON metadata.

The metadata holds what makes a resumed run continue exactly: the RL step, the data position,
the seed, and the evaluation done so far. A checkpoint that cannot be read (corrupt files, an
empty or half-written step directory) is moved aside to `<directory>_quarantine/<step>-<time>`
(kept for inspection, never deleted), and the next older one is restored; the run then saves
that step again without colliding with the broken copy. A save that fails (a full disk, a write
error) raises `CheckpointSaveError` naming the last checkpoint that is intact.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Collection
from typing import Any, NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)


class CheckpointSaveError(OSError):
    """A checkpoint could not be written; the older checkpoints are intact."""


class Quarantined(NamedTuple):
    """A checkpoint that could not be restored and was moved aside."""

    step: int
    path: str
    reason: str


class Checkpointer:
    """Saves and restores `(train_state, metadata)` pairs under `directory/<step>`.

    Args:
      directory: where step folders are written (created).
      max_to_keep: how many recent checkpoints to keep.
      processes: the processes that write and read these checkpoints (default: every process
        of the run); a state that lives on one process of several passes {that process}. Such a
        state's arrays are saved from the host (orbax writes only global arrays from several
        processes) and put back on their devices at restore.

    Example:
      >>> ckpt = Checkpointer(workdir + "/checkpoints")
      >>> ckpt.save(10, state, {"data_position": 80})
      >>> state, meta = ckpt.restore_latest(abstract_state)
    """

    def __init__(
        self, directory: str, *, max_to_keep: int = 3, processes: Collection[int] | None = None
    ):
        self.directory = os.path.abspath(directory)
        self.quarantine_directory = self.directory.rstrip("/") + "_quarantine"
        self.quarantined: list[Quarantined] = []
        multiprocessing = ocp.options.MultiprocessingOptions()
        if processes is not None:
            multiprocessing = ocp.options.MultiprocessingOptions(
                primary_host=min(processes), active_processes=set(processes)
            )
            os.makedirs(self.directory, exist_ok=True)  # orbax creates it for all processes only
        self.host_local = processes is not None
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep,
                create=processes is None,
                multiprocessing_options=multiprocessing,
            ),
        )

    def save(self, step: int, train_state: Any, metadata: dict[str, Any]) -> None:
        """Writes checkpoint `step` and waits until it is on disk.

        Raises:
          CheckpointSaveError: the write failed (e.g. no space left); the checkpoints already on
            disk are untouched and a rerun resumes from the newest of them.
        """
        if self.host_local:
            train_state = jax.device_get(train_state)
        try:
            self.manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(train_state), metadata=ocp.args.JsonSave(metadata)
                ),
                force=True,
            )
            self.manager.wait_until_finished()
        except Exception as e:
            intact = [s for s in self.all_steps() if s != step]
            last = f"step {intact[-1]}" if intact else "none"
            raise CheckpointSaveError(
                f"Could not write checkpoint {step} to {self.directory} ({type(e).__name__}: {e}). "
                f"Newest intact checkpoint: {last}. Free disk space (or fix the directory) and run "
                "the same command again to resume from it."
            ) from e

    def all_steps(self) -> list[int]:
        """Steps with a checkpoint, ascending."""
        self.manager.reload()
        return sorted(self.manager.all_steps())

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict[str, Any]]:
        """Restores checkpoint `step` into arrays shaped (and sharded) like `abstract_state`."""
        target = abstract_state
        if self.host_local:  # numpy on the host first, then onto the target's devices
            target = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), abstract_state)
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target), metadata=ocp.args.JsonRestore()
            ),
        )
        state = restored.state
        if self.host_local:
            state = jax.tree.map(
                lambda x, like: jax.device_put(x, like.sharding) if like.sharding else x,
                state,
                abstract_state,
            )
        return state, dict(restored.metadata)

    def quarantine(self, step: int, reason: str) -> Quarantined:
        """Moves step folder `step` aside (to `quarantine_directory`); returns where it went."""
        os.makedirs(self.quarantine_directory, exist_ok=True)
        source = os.path.join(self.directory, str(step))
        target = os.path.join(self.quarantine_directory, f"{step}-{time.strftime('%Y%m%dT%H%M%S')}")
        suffix = 0
        while os.path.exists(target + (f".{suffix}" if suffix else "")):
            suffix += 1
        target += f".{suffix}" if suffix else ""
        shutil.move(source, target)
        self.manager.reload()
        entry = Quarantined(step, target, reason)
        self.quarantined.append(entry)
        log.warning("Checkpoint %s cannot be restored (%s); moved to %s.", source, reason, target)
        return entry

    def restore_latest(self, abstract_state: Any) -> tuple[Any, dict[str, Any]] | None:
        """The newest checkpoint that restores, or None when none does.

        Each checkpoint that fails to restore is moved aside (`quarantine`, listed in
        `self.quarantined`) before the next older one is tried, so later saves of the same step
        succeed. With every checkpoint broken, the run starts from scratch and the broken ones
        stay in `quarantine_directory`.
        """
        for step in reversed(self.all_steps()):
            try:
                return self.restore(step, abstract_state)
            except Exception as e:  # orbax raises many types for truncated or foreign files
                self.quarantine(step, f"{type(e).__name__}: {str(e)[:300]}")
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
