"""Side work every runner shares, as hooks: checkpoints, evaluation, metrics, progress, the guard.

A hook has four optional methods, called by the runner in list order:

    on_start(run)              after the roles are built, before the first step
    on_step(run, record)       after each step's update, with its `StepRecord`
    on_end(run)                after the last step (not after an exception)
    on_error(run, error)       when an asynchronous run's generator or learner failed

`run` is the runner's `RunContext` (config, workdir, state to checkpoint, evaluation). A hook
that must stop the run raises (the guard raises `NonFiniteLossError`); one that ends it cleanly
sets `record.stop_reason` and `record.last` (the reward-model check), and the runner stops
after the step, which the later hooks save and log as the last one and which is evaluated
after training. The runner marks a step whose updates were all skipped (non-finite) with
`record.skip_save`, and the checkpoint hook does not save it. In the default list the
checkpoint hook comes first (after the reward-model check, which has no on_start), so its
restore (on_start) precedes the evaluation before training, which a resumed run then skips.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

import jax
import tqdm

from jaxrl_llm.checkpoint import Checkpointer, abstract_like, saves_left
from jaxrl_llm.metrics import MetricsWriter
from jaxrl_llm.rewards.model_check import AUC_KEY, ModelCheck

log = logging.getLogger(__name__)

# Keys of the checkpointed run meta (`RunContext.meta`): the reward-model check's streak of low
# steps, and the reason a hook ended the run, which a resumed run reads instead of training on.
STREAK_KEY = "model_check_low_steps"
ENDED_EARLY_KEY = "ended_early"
# ... and the run's wall seconds up to the save, summed over the processes that ran it (each from
# its restore on; a process's time after its last save is not counted, its steps being redone by
# the next), which a resumed run adds its own to; None after a restore from a checkpoint that
# did not keep it (the earlier processes' time unknown).
WALL_TIME_KEY = "wall_time_at_save_s"


class NonFiniteLossError(RuntimeError):
    """Too many consecutive steps had a non-finite loss or gradient."""


@dataclass
class StepRecord:
    """What one finished step reports to the hooks.

    Attributes:
      step: the 1-based number of the step just done.
      scalars: flat metrics of the step (reward/, completion/, train/, critic/, algo/, time/).
      samples: a few {"prompt", "completion", "reward", "answer"} rows for samples.jsonl.
      skip_save: this step must not be checkpointed (its update was skipped).
      last: the run stops after this step (its last configured step, or its time budget).
      stop_reason: set by a hook that ends the run after this step (with `last`, so the hooks
        after it save and log the step as the last one); the runner records it in summary.json
        as "ended_early", and the sweep launcher counts such a run as finished. The hook also
        puts it in the run's meta (`ENDED_EARLY_KEY`), which the step's checkpoint saves.
    """

    step: int
    scalars: dict[str, float]
    samples: list[dict[str, Any]] = field(default_factory=list)
    skip_save: bool = False
    last: bool = False
    stop_reason: str | None = None


class RunContext(Protocol):
    """What hooks may read and call on a run (see `jaxrl_llm.runners.online_run.OnlineRun`)."""

    config: Any
    workdir: str
    meta: dict[str, Any]
    summary: dict[str, Any]
    writer: MetricsWriter

    def state_tree(self) -> Any: ...

    def load_state_tree(self, tree: Any) -> None: ...

    def evaluate(self) -> dict[str, float]: ...


class Hook:
    """Base class with no-op methods; subclass and override what you need."""

    def on_start(self, run: RunContext) -> None:
        """Called once before the first step."""

    def on_step(self, run: RunContext, record: StepRecord) -> None:
        """Called after each step."""

    def on_end(self, run: RunContext) -> None:
        """Called after the last step."""

    def on_error(self, run: RunContext, error: BaseException) -> None:
        """Called when the generator or the learner of an asynchronous run failed or stalled
        (`PipelineError`), before the run raises it."""


class CheckpointHook(Hook):
    """Restores the newest checkpoint on start; saves every `every` steps and at the end,
    keeping the newest `keep`. Given the run's `num_steps`, it checks on start that the disk
    holds the checkpoints still to come (`Checkpointer.ensure_space`) and stops the run there,
    before any evaluation or step, when it does not."""

    def __init__(
        self,
        directory: str,
        *,
        every: int,
        keep: int = 3,
        num_steps: int | None = None,
        processes: Collection[int] | None = None,
    ):
        self.checkpointer = Checkpointer(directory, max_to_keep=keep, processes=processes)
        self.every, self.num_steps = every, num_steps

    def on_start(self, run: RunContext) -> None:
        restored = self.checkpointer.restore_latest(abstract_like(run.state_tree()))
        for entry in self.checkpointer.quarantined:
            print(
                f"[jaxrl_llm] checkpoint {entry.step} could not be restored ({entry.reason}); "
                f"moved to {entry.path}"
            )
        if restored is not None:
            tree, meta = restored
            run.load_state_tree(tree)
            run.meta.update(meta)
            run.meta.setdefault(WALL_TIME_KEY, None)
            print(f"[jaxrl_llm] resumed from {self.checkpointer.directory} at step {meta['step']}")
        else:
            run.meta[WALL_TIME_KEY] = 0.0
        self._earlier_wall_s, self._since = run.meta[WALL_TIME_KEY], time.monotonic()
        # steps logged after the restored one (or any, when none restored) are logged again
        run.writer.rewind(run.meta["step"] if restored is not None else -1)
        if self.num_steps is not None:
            self.checkpointer.ensure_space(
                run.state_tree(),
                saves=saves_left(run.meta["step"], num_steps=self.num_steps, every=self.every),
            )
        moved = len(self.checkpointer.quarantined)
        if moved:  # counted across restarts in the checkpointed metadata
            run.meta["quarantined_checkpoints"] = run.meta.get("quarantined_checkpoints", 0) + moved
            run.writer.write_scalars(run.meta["step"], {"fault/quarantined_checkpoints": moved})

    def on_step(self, run: RunContext, record: StepRecord) -> None:
        if record.skip_save:
            return
        if record.step % self.every == 0 or record.last:
            self._save(run, record.step)

    def on_error(self, run: RunContext, error: BaseException) -> None:
        """Keeps the last trained step: saves it unless it is already saved."""
        step = run.meta["step"]
        if step and step not in self.checkpointer.all_steps():
            self._save(run, step)
            print(f"[jaxrl_llm] {type(error).__name__}: step {step} saved before stopping")

    def _save(self, run: RunContext, step: int) -> None:
        if self._earlier_wall_s is not None:
            run.meta[WALL_TIME_KEY] = self._earlier_wall_s + time.monotonic() - self._since
        self.checkpointer.save(step, run.state_tree(), run.meta)

    def close(self) -> None:
        """Waits for pending writes."""
        self.checkpointer.close()


class EvaluationHook(Hook):
    """Held-out greedy accuracy before training, every `every` steps, and after training."""

    def __init__(self, *, before: bool, after: bool, every: int = 0):
        self.before, self.after, self.every = before, after, every
        self._last: tuple[int, dict[str, float]] | None = None  # (step, result) of `every`

    @staticmethod
    def _log(run: RunContext, step: int, result: dict[str, float]) -> None:
        """`result` as "eval/<metric>", its "seconds" as "time/eval_s" (timings live there)."""
        scalars = {"time/eval_s" if k == "seconds" else f"eval/{k}": v for k, v in result.items()}
        run.writer.write_scalars(step, scalars)
        # per-question correctness and answers of the evaluation just run, when the run keeps them
        run.writer.write_eval_questions(
            step, getattr(run, "eval_correct", {}), getattr(run, "eval_details", {})
        )

    def on_start(self, run: RunContext) -> None:
        if self.before and run.meta.get("eval_before") is None:
            result = run.evaluate()
            run.meta["eval_before"] = result
            self._log(run, 0, result)
            print(
                f"[jaxrl_llm] held-out greedy accuracy before training: "
                f"{100 * result['accuracy']:.1f}% ({result['seconds']:.0f}s)"
            )
        run.summary["eval_before"] = run.meta.get("eval_before")

    def on_step(self, run: RunContext, record: StepRecord) -> None:
        if self.every and record.step % self.every == 0:
            result = run.evaluate()
            self._log(run, record.step, result)
            self._last = (record.step, result)

    def on_end(self, run: RunContext) -> None:
        if not self.after:
            return
        step = run.meta["step"]
        if self._last is not None and self._last[0] == step:
            # the last step was just evaluated (`every` divides it) and the greedy policy has
            # not changed since: that result is the one after training, not evaluated twice
            run.summary["eval_after"] = self._last[1]
            return
        result = run.evaluate()
        run.summary["eval_after"] = result
        self._log(run, step, result)


class NonFiniteGuard(Hook):
    """Counts steps whose every update was skipped (non-finite); raises after K in a row."""

    def __init__(self, max_consecutive: int):
        self.max_consecutive, self.consecutive = max_consecutive, 0

    def on_step(self, run: RunContext, record: StepRecord) -> None:
        if record.scalars.get("train/nonfinite", 0.0) < 1.0:
            self.consecutive = 0
            return
        self.consecutive += 1
        log.warning("Step %d: non-finite loss or gradient; the update was skipped.", record.step)
        print(f"[jaxrl_llm] warning: step {record.step} had a non-finite loss; update skipped")
        if self.consecutive >= self.max_consecutive:
            raise NonFiniteLossError(
                f"{self.consecutive} consecutive steps had a non-finite loss or gradient "
                f"(config.train.max_consecutive_nonfinite={self.max_consecutive}); stopping. The "
                f"last good checkpoint in {os.path.join(run.workdir, 'checkpoints')} is kept; lower "
                "config.optimizer.learning_rate or check the rewards."
            )


class RewardModelCheck(Hook):
    """Watches whether the learned reward model still agrees with the verifier on each step's
    samples (`rewards.model_check`): when its AUC (`reward/model_verifier_auc`) stays under
    `min_auc` for `steps` steps in a row, "flag" warns and marks the step
    (`reward/model_check_flagged`), "stop" ends the run after it. First of the hooks, so the
    checkpoint and metrics hooks see the step as marked (and as the last one)."""

    def __init__(self, *, min_auc: float, steps: int, action: str):
        self.check, self.action = ModelCheck(min_auc=min_auc, steps=steps), action

    def on_step(self, run: RunContext, record: StepRecord) -> None:
        # the streak lives in the checkpointed meta, so a resumed run goes on counting it
        self.check.low = run.meta.get(STREAK_KEY, 0)
        tripped = self.check.observe(record.scalars.get(AUC_KEY))
        run.meta[STREAK_KEY] = self.check.low
        if not tripped:
            return
        c = self.check
        what = (
            f"the reward model ranks the verifier's right samples first with AUC under "
            f"config.rewards.model_check_auc={c.min_auc} for {c.steps} steps in a row (step "
            f"{record.step}: {record.scalars[AUC_KEY]:.3f}): the policy may be exploiting it"
        )
        flagged = run.summary.setdefault("model_check", {"flagged_steps": []})
        flagged["flagged_steps"].append(record.step)
        if self.action == "stop":
            record.last, record.stop_reason = True, f"config.rewards.model_check_auc: {what}"
            # saved with this step's checkpoint: resuming the run does not train past the stop
            run.meta[ENDED_EARLY_KEY] = record.stop_reason
            return
        record.scalars["reward/model_check_flagged"] = 1.0
        log.warning("Step %d: %s.", record.step, what)
        print(f"[jaxrl_llm] warning: {what} (config.rewards.model_check_action='flag')")


class MetricsHook(Hook):
    """Writes each step's scalars (metrics.jsonl, TensorBoard) and, every N steps, samples."""

    def __init__(self, *, sample_every: int):
        self.sample_every = sample_every

    def on_step(self, run: RunContext, record: StepRecord) -> None:
        run.writer.write_scalars(record.step, record.scalars)
        if self.sample_every and record.step % self.sample_every == 0 and record.samples:
            run.writer.write_samples(record.step, record.samples)


class ProgressHook(Hook):
    """A tqdm bar over the steps with reward, accuracy, KL, entropy, length and time split."""

    def __init__(self, *, total: int, desc: str, enabled: bool = True):
        self.total, self.desc, self.enabled = total, desc, enabled
        self.bar = None

    def on_start(self, run: RunContext) -> None:
        start = run.meta["step"]
        self.bar = tqdm.tqdm(
            total=self.total,
            initial=start,
            desc=self.desc,
            disable=not self.enabled,
            dynamic_ncols=True,
        )

    def on_step(self, run: RunContext, record: StepRecord) -> None:
        self.bar.set_postfix_str(progress_text(record.scalars))
        self.bar.update(1)

    def on_end(self, run: RunContext) -> None:
        if self.bar is not None:
            self.bar.close()


def progress_text(s: dict[str, float]) -> str:
    """The progress bar's fields, each named, from one step's scalars; the seconds the step
    spent in rollout, reward and train come last:
    "reward 0.50 acc 0.25 kl 0.0010 ent 1.20 len 45 | rollout 25s rewards 0s train 47s"."""
    kl = s.get("train/kl_ref", s.get("algo/kl", s.get("train/approx_kl", 0.0)))
    return (
        f"reward {s['reward/mean']:.2f} acc {s['reward/accuracy']:.2f} kl {kl:.4f} "
        f"ent {s.get('train/entropy', float('nan')):.2f} len {s['completion/length']:.0f} | "
        f"rollout {s['time/rollout_s']:.0f}s rewards {s['time/reward_s']:.0f}s "
        f"train {s['time/train_s']:.0f}s"
    )


def default_hooks(config, workdir: str, *, desc: str, progress: bool = True) -> list[Hook]:
    """The hooks of an online run, in their order (see the module docstring)."""
    check = []
    if config.rewards.get("model_check_auc", 0.0) > 0:  # first: it may end the run at this step
        check = [
            RewardModelCheck(
                min_auc=config.rewards.model_check_auc,
                steps=config.rewards.model_check_steps,
                action=config.rewards.model_check_action,
            )
        ]
    return check + [
        CheckpointHook(
            os.path.join(workdir, "checkpoints"),
            every=config.train.checkpoint_every,
            keep=config.train.keep_checkpoints,
            num_steps=config.train.num_steps,
            # A two-process asynchronous run's state lives on its learner process alone.
            processes={jax.process_index()} if config.async_rl.processes == 2 else None,
        ),
        EvaluationHook(before=config.eval.before, after=config.eval.after, every=config.eval.every),
        MetricsHook(sample_every=config.train.sample_every),
        ProgressHook(total=config.train.num_steps, desc=desc, enabled=progress),
        NonFiniteGuard(config.train.max_consecutive_nonfinite),  # last: the step is logged first
    ]
