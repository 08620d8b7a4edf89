"""What a run's life needs besides its steps: which metrics may differ between two runs of one
seed, stopping on SIGTERM after the current step, and refusing to resume another run's
checkpoints.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

import ml_collections

from jaxrl_llm.data.presets import resolve_task
from jaxrl_llm.runners.staleness import checkpoint_slots

__all__ = ["TIME_KEYS", "StopSignal", "check_resumable", "is_process_dependent"]

# Metrics that depend on the process, not on the run's seed. Every timing is under "time/"
# (phases, evaluation, weight syncs, the asynchronous runner's idle times, whether this step
# compiled the train step for a new batch shape: a resumed process compiles again); outside it
# only the asynchronous runner's queue depth. `is_process_dependent` says which keys these are.
TIME_KEYS = (
    "async/queue_depth",
    "time/learner_idle_s",
    "time/generator_idle_s",
    "time/pull_s",
    "time/eval_s",
    "time/episodes_s",
    "time/rollout_s",
    "time/reward_s",
    "time/prepare_s",
    "time/train_s",
    "time/step_s",
    "time/sync_s",
    "time/new_train_shape",
)


def is_process_dependent(key: str) -> bool:
    """Whether metric `key` may differ between two runs of one config and seed: timings
    (everything under "time/") and `TIME_KEYS`."""
    return key.startswith("time/") or key in TIME_KEYS


class StopSignal:
    """Turns SIGTERM (a preemption, `kill`) into a request to stop after the current step.

    The runner then checkpoints that step and returns normally (exit code 0). Installed only in
    the main thread (Python delivers signals there); elsewhere `requested` stays None.
    """

    def __init__(self):
        self.requested: str | None = None
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        del frame
        self.requested = signal.Signals(signum).name
        print(f"[jaxrl_llm] {self.requested}: finishing the current step, then saving", flush=True)

    def restore(self) -> None:
        """Puts the previous SIGTERM handler back."""
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


def _run_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote the checkpoints: the algorithm,
    the task as generated (preset resolved), the model, and how many older weight versions a
    checkpoint holds (deterministic asynchronous runs; another count would not restore)."""
    env = (config.get("env") or {}).get("name", "")  # absent from configs before episodes
    from jaxrl_llm.envs.task_registry import has_own_data

    if has_own_data(env):  # the episode task makes its own examples
        task, kwargs = env, {k: v for k, v in config["env"].items() if k.startswith(env)}
    else:
        task, kwargs = resolve_task(config["task"]["name"], dict(config["task"]["kwargs"]))
    # async_rl is absent from configs saved before the section existed
    slots = checkpoint_slots(config.get("async_rl") or {})
    return {
        "episodes": env or "single-turn",
        "algorithm": config["algorithm"],
        "task": f"{task} {json.dumps(kwargs, sort_keys=True, default=list)}",
        "model": f"{config['model']['name']} ({config['model']['init']})",
        "async_rl": f"{slots} older weight versions per checkpoint",
    }


def check_resumable(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Raises ValueError when `workdir` holds checkpoints of a run on another task, model or
    algorithm (resuming would silently continue that run)."""
    saved_path = os.path.join(workdir, "config.json")
    checkpoints = os.path.join(workdir, "checkpoints")
    if not (os.path.isfile(saved_path) and os.path.isdir(checkpoints) and os.listdir(checkpoints)):
        return
    with open(saved_path) as f:
        saved = _run_identity(json.load(f))
    current = _run_identity(json.loads(config.to_json_best_effort()))
    for field, value in saved.items():
        if value != current[field]:
            raise ValueError(
                f"{workdir!r} holds checkpoints of a run with {field} {value}, not "
                f"{current[field]}; resuming would continue that run. Give another --workdir "
                "(scripts/main.sh names it after config.task.name) or delete this one."
            )
