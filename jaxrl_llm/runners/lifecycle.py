"""What a run's life needs besides its steps: which metrics may differ between two runs of one
seed, stopping on SIGTERM after the current step, and refusing to resume another run's
checkpoints (another task, model or algorithm, or other values of the fields that shape
training).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

import ml_collections

from jaxrl_llm.algorithms.staleness import checkpoint_slots
from jaxrl_llm.config import flat_dict
from jaxrl_llm.data.presets import resolve_task

__all__ = [
    "FREE_ON_RESUME",
    "TIME_KEYS",
    "StopSignal",
    "changed_fields",
    "check_resumable",
    "is_process_dependent",
]

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
    from jaxrl_llm.data.user_data import uses_user_data
    from jaxrl_llm.envs.task_registry import has_own_data

    if has_own_data(env):  # the episode task makes its own examples
        task, kwargs = env, {k: v for k, v in config["env"].items() if k.startswith(env)}
    elif uses_user_data(config["task"]):  # the user's prompts; config.task.name labels them
        task, kwargs = config["task"]["name"], dict(config["task"]["data"])
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


# Fields a resumed run may change: how it is evaluated, checkpointed, logged, timed, placed and
# executed, and how long it runs, not what it learns from. An entry ending in "." covers a
# section, one starting with "*" every field that ends so. Any other field that differs from
# the run that wrote the checkpoints is a change of the run itself (its rate, rollout, loss,
# rewards, stabilisers or seed) and is refused unless config.train.resume_with_changes is set.
FREE_ON_RESUME = (
    "eval.",
    "placement.",
    "train.num_steps",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.sample_every",
    "train.max_time_s",
    "train.max_consecutive_nonfinite",
    "train.remat",
    "train.grad_accumulation",  # the same update in micro-batches: memory, not what it learns
    "train.planned_step",
    "train.pack_sequences",
    "train.pack_row_multiple",
    "train.pack_width",
    "train.resume_with_changes",
    "rollout.min_prompt_bucket",
    "rollout.compaction",
    "rollout.prefix_sharing",
    "rollout.decode_batch",
    "rollout.forward_batch",
    "rollout.decode_attention",
    "async_rl.timeout_s",
    "async_rl.transfer_host",
    "*.eval_every",  # a stage section's evaluation cadence (sft.eval_every, ...)
    # compared by `_run_identity`, with presets resolved
    "task.name",
    "task.kwargs",
    "model.name",
    "model.init",
    "algorithm",
)


def changed_fields(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple]:
    """{dotted field: (saved value, current value)} of the fields present in both configs (JSON
    dicts), not in `FREE_ON_RESUME`, whose values differ. A field only one config has is not
    compared: a config saved before the field existed ran with the behaviour its default keeps."""
    saved_flat, current_flat = flat_dict(saved), flat_dict(current)
    return {
        field: (saved_flat[field], value)
        for field, value in current_flat.items()
        if field in saved_flat and saved_flat[field] != value and not _free_on_resume(field)
    }


def _free_on_resume(field: str) -> bool:
    for free in FREE_ON_RESUME:
        if free.startswith("*"):
            if field.endswith(free[1:]):
                return True
        elif field.startswith(free) if free.endswith(".") else field == free:
            return True
    return False


def check_resumable(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Raises ValueError when `workdir` holds checkpoints of another run: another task, model or
    algorithm always; other values of the fields that shape training (everything outside
    `FREE_ON_RESUME`) unless `config.train.resume_with_changes`. Resuming would silently
    continue that run under this run's name."""
    saved_path = os.path.join(workdir, "config.json")
    checkpoints = os.path.join(workdir, "checkpoints")
    if not (os.path.isfile(saved_path) and os.path.isdir(checkpoints) and os.listdir(checkpoints)):
        return
    with open(saved_path) as f:
        saved_config = json.load(f)
    current_config = json.loads(config.to_json_best_effort())
    saved, current = _run_identity(saved_config), _run_identity(current_config)
    for field, value in saved.items():
        if value != current[field]:
            raise ValueError(
                f"{workdir!r} holds checkpoints of a run with {field} {value}, not "
                f"{current[field]}; resuming would continue that run. Give another --workdir "
                "(scripts/main.sh names it after config.task.name) or delete this one."
            )
    if config.train.get("resume_with_changes", False):
        return
    changed = changed_fields(saved_config, current_config)
    if changed:
        shown = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in list(changed.items())[:8])
        more = f" (and {len(changed) - 8} more)" if len(changed) > 8 else ""
        raise ValueError(
            f"{workdir!r} holds checkpoints of a run with other training settings: {shown}"
            f"{more}. Resuming would continue that run as if it were this one. Give another "
            "--workdir or delete this one; to continue it under the new settings on purpose, "
            "set --config.train.resume_with_changes=true."
        )
