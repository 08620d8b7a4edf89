"""The online RL runner: a collector and a schedule, put together from the config, in a loop.

    summary = train(config, workdir)                  # the algorithm is config.algorithm
    summary = train(config, workdir, algorithm=mine)  # or any `Algorithm` value

The collector makes each step's samples: `SingleTurnSampler` (G completions per prompt), or
`EpisodePlayer` with `config.env.name` (G multi-turn episodes per prompt). The schedule drives
collect -> process -> update: `SyncSchedule`, or `AsyncSchedule` with `config.async_rl.enabled`
(a generator beside the learner, bounded staleness; as two processes with
`config.async_rl.processes = 2`). Every pair works; the learner side is `OnlineRun`'s.
Checkpoints, evaluation, metrics, progress and the non-finite guard are hooks
(`jaxrl_llm.runners.hooks`). Nothing here knows a particular algorithm.

Each step is reproducible from (seed, step, data position, state), which is everything a
checkpoint stores, so a killed run resumes with the same metrics. SIGTERM stops the run after the
current step, with a checkpoint of it (`StopSignal`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax
import ml_collections

from jaxrl_llm import algorithms
from jaxrl_llm.algorithms.base import Algorithm
from jaxrl_llm.config import validate_config
from jaxrl_llm.evals import describe_held_out
from jaxrl_llm.host import accelerator_info, host_info
from jaxrl_llm.rewards.user_loading import UserRewardFns
from jaxrl_llm.runners.collectors import Collector
from jaxrl_llm.runners.components import Roles, RunParts, build_parts, build_roles
from jaxrl_llm.runners.episode_player import EpisodePlayer
from jaxrl_llm.runners.hooks import ENDED_EARLY_KEY, WALL_TIME_KEY, Hook, default_hooks
from jaxrl_llm.runners.lifecycle import StopSignal, check_resumable
from jaxrl_llm.runners.online_async import AsyncSchedule
from jaxrl_llm.runners.online_run import OnlineRun
from jaxrl_llm.runners.online_sync import Schedule, SyncSchedule
from jaxrl_llm.runners.pipeline import PipelineError
from jaxrl_llm.runners.sampler import SingleTurnSampler

__all__ = ["build_run", "collector_type", "make_collector", "make_schedule", "run_online", "train"]


def collector_type(config) -> type[Collector]:
    """The run's kind of collector: `EpisodePlayer` with `config.env.name`, else
    `SingleTurnSampler`."""
    return EpisodePlayer if config.env.name else SingleTurnSampler


def make_collector(config, algorithm: Algorithm, parts: RunParts, roles: Roles) -> Collector:
    """The run's collector: episodes with `config.env.name`, else single-turn samples."""
    return collector_type(config)(config, algorithm, parts, roles)


def make_schedule(config) -> Schedule:
    """The run's schedule: asynchronous with `config.async_rl.enabled`, else synchronous."""
    return AsyncSchedule(config) if config.async_rl.enabled else SyncSchedule()


def build_run(
    config, workdir: str, algorithm: Algorithm, parts: RunParts, roles: Roles
) -> OnlineRun:
    """An `OnlineRun` of the config's collector and schedule."""
    collector, schedule = make_collector(config, algorithm, parts, roles), make_schedule(config)
    return OnlineRun(
        config, workdir, algorithm, parts, roles, collector=collector, schedule=schedule
    )


def _two_process_devices() -> list[jax.Device]:
    """This process's devices in a two-process asynchronous run; raises if it is not one."""
    if jax.process_count() != 2:
        raise ValueError(
            f"config.async_rl.processes=2 needs two processes of one jax.distributed run, this "
            f"run has {jax.process_count()}: start it with `python -m jaxrl_llm.distributed "
            "--num_processes 2 -- python -m jaxrl_llm.main ...`, or set "
            "config.async_rl.processes=1."
        )
    return jax.local_devices()


def _serve_generation(
    config, workdir: str, algorithm: Algorithm | None, reward_fns: UserRewardFns | None
) -> dict[str, Any]:
    """Process 1 of a two-process asynchronous run: builds the run on its own devices and
    generates every batch for the learner (process 0)."""
    algorithm = algorithms.check_algorithm(algorithm or algorithms.make(config))
    collector_type(config).check(algorithm)  # what it asks collected, before the model loads
    parts = build_parts(config, reward_fns)
    roles = build_roles(config, algorithm, parts, jax.local_devices())
    run = build_run(config, workdir, algorithm, parts, roles)
    try:
        return run.schedule.serve_generation(run)
    finally:
        run.writer.close()


def train(config: ml_collections.ConfigDict, workdir: str, **options) -> dict[str, Any]:
    """Validates the config, then runs the configured algorithm (`run_online`), resuming from
    `workdir`'s latest checkpoint if any.

    Args:
      config: a run config (`jaxrl_llm.config.config_for(name)`), validated here.
      workdir: the run directory.
      **options: `run_online`'s: `progress` (show a tqdm progress bar), `algorithm` (an
        `Algorithm` to run instead of `config.algorithm`, e.g. one with a custom loss built in
        a notebook; the config still supplies everything else), `hooks` (replaces
        `default_hooks(...)`), `reward_fns` (Python reward functions).

    Returns:
      The summary dict.

    Example:
      >>> summary = train(config_for("ppo"), "runs/ppo")
    """
    validate_config(config)
    return run_online(config, workdir, **options)


def _first_step(config: ml_collections.ConfigDict, run: OnlineRun) -> int:
    """The step to train from: the restored one, or `num_steps` (none) for a run the reward-model
    check ended, while its config still asks the check to stop runs."""
    step, ended = run.meta["step"], run.meta.get(ENDED_EARLY_KEY)
    if not ended:
        return step
    rewards = config.rewards
    if rewards.get("model_check_auc", 0.0) > 0 and rewards.model_check_action == "stop":
        print(f"[jaxrl_llm] this run ended at step {step}: {ended}")
        run.summary["ended_early"] = ended
        return config.train.num_steps
    print(f"[jaxrl_llm] this run ended at step {step}; the check no longer stops it: training on")
    del run.meta[ENDED_EARLY_KEY]
    return step


def wall_time_summary(
    earlier_wall_s: float | None, process_wall_s: float, resumed_step: int
) -> dict[str, float]:
    """The summary's wall time: this process's plus the earlier processes' of a resumed run
    (`WALL_TIME_KEY` of the checkpoint it restored; 0 for a fresh run), or, when the checkpoint
    did not keep it (None), this process's alone with "wall_time_since_step", the step it
    resumed at (the report marks such a wall time a lower bound)."""
    if earlier_wall_s is None:
        return {"wall_time_s": process_wall_s, "wall_time_since_step": resumed_step}
    return {"wall_time_s": earlier_wall_s + process_wall_s}


def run_online(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    progress: bool = True,
    algorithm: Algorithm | None = None,
    hooks: list[Hook] | None = None,
    reward_fns: UserRewardFns | None = None,
) -> dict[str, Any]:
    """Runs a validated config's algorithm (`train` less the check; `run_stage` after
    `validate_stage`), resuming from `workdir`'s latest checkpoint if any.

    Writes `metrics.jsonl`, `samples.jsonl`, TensorBoard events, `checkpoints/` and, at the end,
    `summary.json` (accuracy before and after, wall time: "wall_time_s", summed over the processes
    that ran a resumed run, or this process's with "wall_time_since_step" when the checkpoint it
    resumed from did not keep the earlier time) into `workdir`.

    Args:
      config: a validated run config.
      workdir: the run directory.
      progress: show a tqdm progress bar.
      algorithm: an `Algorithm` to run instead of `config.algorithm`.
      hooks: replaces `default_hooks(...)`.
      reward_fns: the user's Python reward functions, beside `config.rewards.functions`
        (`components.build_rewards`).

    Returns:
      The summary dict.
    """
    start_time = time.time()
    devices = None
    if config.async_rl.enabled and config.async_rl.processes == 2:
        devices = _two_process_devices()
        if jax.process_index() == 1:  # the generator: no checkpoints, metrics or evaluation
            generator_dir = os.path.join(workdir, "generator")
            return _serve_generation(config, generator_dir, algorithm, reward_fns)
    os.makedirs(workdir, exist_ok=True)
    check_resumable(config, workdir)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort(indent=2))
    algorithm = algorithms.check_algorithm(algorithm or algorithms.make(config))
    collector_type(config).check(algorithm)  # what it asks collected, before the model loads
    parts = build_parts(config, reward_fns)
    roles = build_roles(config, algorithm, parts, devices)
    run = build_run(config, workdir, algorithm, parts, roles)
    run.summary["host"] = {**host_info(), **accelerator_info()}
    run.summary["held_out"] = describe_held_out(run.eval_sets)
    if hooks is None:
        hooks = default_hooks(config, workdir, desc=algorithm.name.upper(), progress=progress)
    schedule, stop = run.schedule, StopSignal()
    try:
        for hook in hooks:
            hook.on_start(run)
        # the wall time of the processes before this one (a restored run), None when unknown
        earlier_wall_s, resumed_step = run.meta.get(WALL_TIME_KEY, 0.0), run.meta["step"]
        parts.batcher.restore(run.meta["data"])
        run.collector.start(run)
        run.pretrain_critic()  # value pretraining, when the algorithm asks for it
        schedule.start(run)
        train_start = time.time()
        first_step = _first_step(config, run)
        for step in range(first_step, config.train.num_steps):
            record = schedule.step(run, step)
            budget = config.train.max_time_s
            out_of_time = bool(budget) and time.time() - train_start > budget
            # read once: a signal that lands while the hooks run (after the checkpoint hook
            # decided not to save) stops the run after the next step, which is then saved
            stopping = stop.requested
            record.last = record.last or out_of_time or bool(stopping)
            for hook in hooks:
                hook.on_step(run, record)
            if stopping:
                print(f"[jaxrl_llm] {stopping} received: step {step + 1} saved, stopping")
                run.summary["stopped_by"] = stopping
                break
            if record.stop_reason:  # a hook ended the run (the reward-model check)
                print(f"[jaxrl_llm] stopping after step {step + 1}: {record.stop_reason}")
                run.summary["ended_early"] = record.stop_reason
                break
            if out_of_time:
                print(
                    f"[jaxrl_llm] stopping after step {step + 1}: train.max_time_s={budget} spent"
                )
                break
        schedule.close(run)
        run.summary["train_time_s"] = time.time() - train_start
        if not stop.requested:  # a preempted run leaves as fast as it can
            for hook in hooks:
                hook.on_end(run)
    except PipelineError as e:
        for hook in hooks:
            hook.on_error(run, e)
        raise
    except BaseException as e:
        schedule.fail(run, e)
        raise
    finally:
        schedule.close(run)
        stop.restore()
        run.writer.close()
        for hook in hooks:
            if hasattr(hook, "close"):
                hook.close()
    run.summary["steps"] = run.meta["step"]
    run.summary["algorithm"] = algorithm.name
    if config.train.get("planned_step"):  # how much of the run the planned program ran
        actor = roles.actor
        run.summary["planned_step"] = {
            "updates": actor.planned_updates,
            "unplanned_shapes": [list(map(list, s)) for s in actor.unplanned_shapes],
        }
    process_wall_s = time.time() - start_time
    run.summary.update(wall_time_summary(earlier_wall_s, process_wall_s, resumed_step))
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(run.summary, f, indent=2)
    before, after = run.summary.get("eval_before"), run.summary.get("eval_after")
    if before and after:
        print(
            f"[jaxrl_llm] held-out greedy accuracy: before {100 * before['accuracy']:.1f}% -> "
            f"after {100 * after['accuracy']:.1f}% ({len(run.eval_sets[0].examples)} prompts, "
            f"{process_wall_s / 60:.1f} min in this process)"
        )
    return run.summary
