"""Checkpoints with orbax: the train state (params, optimizer state, step) plus JSON metadata.

The metadata holds what makes a resumed run continue exactly: the RL step, the data position,
the seed, and the evaluation done so far. A checkpoint that cannot be read (corrupt files, an
empty or half-written step directory) is moved aside to `<directory>_quarantine/<step>-<time>`
(kept for inspection, never deleted), and the next older one is restored; the run then saves
that step again without colliding with the broken copy. A save that fails (a full disk, a write
error) raises `CheckpointSaveError` naming the last checkpoint that is intact; before a run's
first step, `Checkpointer.ensure_space` raises `CheckpointSpaceError` when the disk cannot hold
the checkpoints the run will keep, so a full disk stops it at step 0 instead of at a save.

A checkpoint of SmolLM2-135M's GRPO state (float32 weights and AdamW moments) is 1.5 GB on
disk; `config.train.keep_checkpoints` (orbax's max_to_keep, default 3) is how many a finished run
leaves, so a sweep of dozens of runs wants 1.
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


class CheckpointSpaceError(CheckpointSaveError):
    """The disk cannot hold the checkpoints a run will write; raised before its first step."""


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
        self.max_to_keep = max_to_keep
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

    def ensure_space(self, train_state: Any, *, saves: int) -> None:
        """Raises `CheckpointSpaceError` unless the disk under the directory has room for `saves`
        more checkpoints of `train_state` (arrays or `jax.ShapeDtypeStruct`s) as this manager
        keeps them: a save writes the new checkpoint before the oldest beyond `max_to_keep` is
        removed, so with E on disk the peak is min(E + saves - 1, max_to_keep) + 1 of them.
        The size counted is the state's array bytes, an upper bound: orbax compresses
        (zstd), which leaves trained weights near that size (1.5 GB of 1.6 for SmolLM2-135M
        with its optimizer state) and saves most on zeros (6 MB of 19 for the tiny test
        model just initialised)."""
        if saves <= 0:
            return
        existing = len(self.all_steps())
        peak = min(existing + saves - 1, self.max_to_keep) + 1
        size = checkpoint_bytes(train_state)
        needed = max(peak - existing, 0) * size
        directory = self.directory
        while not os.path.isdir(directory):  # the first existing folder holds the disk's figure
            directory = os.path.dirname(directory)
        free = shutil.disk_usage(directory).free
        if needed > free:
            raise CheckpointSpaceError(
                f"config.train.keep_checkpoints={self.max_to_keep}: this run will write {saves} "
                f"checkpoint(s) of {size / 1e9:.2f} GB to {self.directory}, up to {peak} on disk "
                f"at once ({needed / 1e9:.2f} GB more than now), but {free / 1e9:.2f} GB is free "
                "there. Free disk space, lower config.train.keep_checkpoints (1 keeps only the "
                "newest) or raise config.train.checkpoint_every, then run the same command again."
            )

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


def checkpoint_bytes(tree: Any) -> int:
    """The bytes of the arrays in `tree` (arrays or `jax.ShapeDtypeStruct`s) uncompressed: at
    least a checkpoint's size on disk, less orbax's few kB of metadata (see
    `Checkpointer.ensure_space`)."""
    return sum(
        int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize
        for leaf in jax.tree.leaves(tree)
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype")
    )


def saves_left(step: int, *, num_steps: int, every: int) -> int:
    """How many checkpoints a run at `step` still writes when it saves every `every` steps and
    at its last step `num_steps`.

    Example:
      >>> saves_left(0, num_steps=30, every=10), saves_left(20, num_steps=25, every=10)
      (3, 1)
    """
    if step >= num_steps:
        return 0
    return num_steps // every - step // every + (num_steps % every != 0)


def abstract_like(tree: Any) -> Any:
    """`jax.ShapeDtypeStruct`s (with shardings) of a pytree of arrays, a restore target."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        tree,
    )
