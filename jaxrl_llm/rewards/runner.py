"""Running several reward functions over a batch, with per-call time limits and error counting.

A reward function is `(prompt, completion, example) -> float`. `RewardRunner` calls every function
on every sample; a call that raises, returns a non-finite or non-numeric value, or runs past
`timeout_s` scores 0 for that sample and is counted in `RewardOutput.num_errors` /
`num_timeouts`; the first failure of each kind is logged (with the exception type), and the batch
goes on.

A user's reward in TRL's batch shape (`jaxrl_llm.rewards.user.BatchReward`) is one call over the
whole batch, under the same time limit; what it fails on follows its `on_error` policy ("skip":
those samples get its group's mean and are counted in `RewardOutput.num_skipped`; "stop": the call
raises one line), never a silent 0.

Time limits are thread-based: each call runs in its own daemon thread, and the runner stops
waiting for it `timeout_s` seconds after it started. Python cannot kill a thread, so a call that
hangs is abandoned, not stopped: it keeps running in the background (and, if it spins on the CPU,
keeps taking a share of the GIL) until it returns or the process exits; being a daemon thread, it
never blocks exit. `RewardRunner.num_abandoned_alive` counts such threads. Rewards that can hang
forever on pathological input should bound their own work (math-verify, for one, has its own
signal-based limit, which works only in the main thread: pass `timeout_s=None` to run every call
inline in the calling thread, with no limit from the runner).
"""

from __future__ import annotations

import collections
import difflib
import logging
import math
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from jaxrl_llm.data import Example
from jaxrl_llm.rewards.user import (
    BatchReward,
    BatchScores,
    RewardColumnError,
    RewardFunctionError,
    fill_skipped,
    function_name,
)
from jaxrl_llm.rewards.verifiers import check_answer_rule

__all__ = ["RewardFn", "RewardOutput", "RewardRunner"]

log = logging.getLogger(__name__)


class RewardFn(Protocol):
    """A reward function: `(prompt, completion, example) -> float`, pure and thread-safe.

    Example:
      >>> def brevity(prompt: str, completion: str, example: Example) -> float:
      ...     return 1.0 if len(completion) < 100 else 0.0
    """

    def __call__(self, prompt: str, completion: str, example: Example, /) -> float: ...


class RewardOutput(NamedTuple):
    """Rewards of one batch.

    Attributes:
      total: [B] float32, the weighted sum over functions.
      per_function: name -> [B] float32 unweighted rewards (0 where the call failed).
      num_errors: name -> number of samples whose call raised or returned a bad value.
      num_timeouts: name -> number of samples whose call ran past the time limit.
      steps: the process reward model's scored steps (`jaxrl_llm.rewards.process.StepRewards`,
        weighted as in `total`) when the reward role has one, else None: what dense process
        rewards place on each step's last token.
      num_skipped: user batch reward name -> samples it gave no valid value (None, a bad value,
        a failed call), filled with its group's mean under on_error="skip"; None when the runner
        has no user reward.

    Example:
      >>> out = RewardRunner({"task": task_reward}, timeout_s=5.0)(prompts, completions, examples)
      >>> out.total.shape, out.num_errors
      ((8,), {'task': 0})
    """

    total: np.ndarray
    per_function: dict[str, np.ndarray]
    num_errors: dict[str, int]
    num_timeouts: dict[str, int]
    steps: Any = None
    num_skipped: dict[str, int] | None = None

    def metrics(self, prefix: str = "reward") -> dict[str, float]:
        """Flat scalars for logging: batch means of the total and of each function, and counts.

        Example:
          >>> out.metrics()
          {'reward/total': 0.75, 'reward/task': 0.5, 'reward/task/errors': 0.0, ...}
        """
        metrics = {f"{prefix}/total": float(np.mean(self.total)) if self.total.size else 0.0}
        for name, values in self.per_function.items():
            metrics[f"{prefix}/{name}"] = float(np.mean(values)) if values.size else 0.0
            metrics[f"{prefix}/{name}/errors"] = float(self.num_errors[name])
            metrics[f"{prefix}/{name}/timeouts"] = float(self.num_timeouts[name])
        for name, count in (self.num_skipped or {}).items():
            metrics[f"{prefix}/{name}/skipped"] = float(count)
        return metrics


class _Call:
    """One (function, sample) call; `value` or `error` is set by the thread that runs it."""

    __slots__ = ("name", "sample", "fn", "args", "value", "error")

    def __init__(self, name, sample, fn, args):
        self.name, self.sample, self.fn, self.args = name, sample, fn, args
        self.value, self.error = None, None

    def run(self) -> None:
        try:
            value = self.fn(*self.args)
            result = float(value)  # TypeError / ValueError for None, strings, arrays of size > 1
            if not math.isfinite(result):
                raise ValueError(f"reward is not finite: {value!r}")
            self.value = result
        except Exception as e:  # any failure of user code scores 0 and is counted
            self.error = e


class _BatchCall(_Call):
    """One call of a user's batch reward over the whole batch; `value` is its `BatchScores`."""

    __slots__ = ()

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except Exception as e:  # handled by the reward's on_error policy (`_batch_scores`)
            self.error = e


def _run_and_report(call: _Call, index: int, done: queue.SimpleQueue) -> None:
    call.run()
    done.put(index)


class RewardRunner:
    """Calls reward functions over a batch and combines them with weights.

    Args:
      functions: `{name: fn}`, or a list of functions named by their `__name__` (the names must
        be distinct). Each fn is `(prompt, completion, example) -> float`, or a
        `jaxrl_llm.rewards.user.BatchReward` (a user's function over the whole batch).
      weights: None (all 1.0), a sequence aligned with `functions`, or `{name: weight}` naming
        every function.
      timeout_s: wall-clock limit of one call (a `BatchReward`'s call covers the whole batch),
        counted from when the call starts; None runs every call inline in the calling thread
        without a limit.
      max_concurrency: calls running at once (threads). CPU-bound rewards share the GIL, so with
        several running at once each takes longer in wall-clock time; 1 makes `timeout_s` a
        per-call budget of nearly the whole interpreter.
      answer_rule: the answer rule its "task" function reads answers with
        (`rewards.ANSWER_RULES`); the evaluator reads the answers it votes over (maj@k) the same
        way. The runner does not pass it on: whoever builds the functions binds it
        (`jaxrl_llm.runners.components.build_rewards` does both from `config.rewards.answer_rule`).

    Example:
      >>> runner = RewardRunner({"task": task_reward, "format": format_reward},
      ...                       weights={"task": 1.0, "format": 0.1}, timeout_s=5.0)
      >>> out = runner(prompts, completions, examples)
      >>> out.total          # [B] float32: task + 0.1 * format
      >>> out.num_timeouts   # {"task": 0, "format": 0}
    """

    def __init__(
        self,
        functions: Mapping[str, RewardFn | BatchReward] | Sequence[RewardFn | BatchReward],
        *,
        weights: Mapping[str, float] | Sequence[float] | None = None,
        timeout_s: float | None = 5.0,
        max_concurrency: int = 4,
        answer_rule: str = "last_number",
    ):
        check_answer_rule(answer_rule, field="RewardRunner(answer_rule=...)")
        self.answer_rule = answer_rule
        if isinstance(functions, Mapping):
            named = dict(functions)
        else:
            named = {}
            for fn in functions:
                name = function_name(fn)
                if name in named:
                    raise ValueError(
                        f"RewardRunner: two reward functions are named {name!r}; pass a dict "
                        "{name: fn} to name them."
                    )
                named[name] = fn
        if not named:
            raise ValueError("RewardRunner: no reward functions given.")
        for name, fn in named.items():
            if not callable(fn):
                raise TypeError(f"RewardRunner: reward {name!r} is not callable: {fn!r}")
        self.functions: dict[str, RewardFn | BatchReward] = named
        self.weights: dict[str, float] = self._resolve_weights(weights)
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"RewardRunner: timeout_s={timeout_s} must be positive or None.")
        if max_concurrency < 1:
            raise ValueError(f"RewardRunner: max_concurrency={max_concurrency} must be >= 1.")
        self.timeout_s, self.max_concurrency = timeout_s, max_concurrency
        self._logged: set[tuple[str, str]] = set()
        self._abandoned: list[threading.Thread] = []

    def _resolve_weights(self, weights) -> dict[str, float]:
        names = list(self.functions)
        if weights is None:
            return dict.fromkeys(names, 1.0)
        if isinstance(weights, Mapping):
            unknown = [k for k in weights if k not in self.functions]
            missing = [k for k in names if k not in weights]
            if unknown or missing:
                hints = "".join(
                    f" {k!r} is not a reward (did you mean {difflib.get_close_matches(k, names, 1)}?)."
                    for k in unknown
                )
                raise ValueError(
                    f"RewardRunner: weights must name every reward function {names}; "
                    f"missing {missing}.{hints}"
                )
            return {name: float(weights[name]) for name in names}
        weights = list(weights)
        if len(weights) != len(names):
            raise ValueError(
                f"RewardRunner: {len(weights)} weights for {len(names)} reward functions {names}."
            )
        return {name: float(w) for name, w in zip(names, weights, strict=True)}

    @property
    def num_abandoned_alive(self) -> int:
        """Threads of timed-out calls that are still running."""
        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        return len(self._abandoned)

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Example]
    ) -> RewardOutput:
        """Rewards of a batch of B samples (prompt i, completion i, example i).

        Returns:
          A `RewardOutput` with [B] float32 arrays.
        """
        b = len(completions)
        if len(prompts) != b or len(examples) != b:
            raise ValueError(
                f"RewardRunner: {len(prompts)} prompts, {b} completions and {len(examples)} "
                "examples; they must be equally many (one prompt and example per completion)."
            )
        batch_calls = [
            _BatchCall(name, "all", fn, (prompts, completions, examples))
            for name, fn in self.functions.items()
            if isinstance(fn, BatchReward)
        ]
        calls = batch_calls + [
            _Call(name, i, fn, (prompts[i], completions[i], examples[i]))
            for name, fn in self.functions.items()
            if not isinstance(fn, BatchReward)
            for i in range(b)
        ]
        if self.timeout_s is None:
            for call in calls:
                call.run()
            timed_out = set()
        else:
            timed_out = self._run_with_time_limit(calls)

        per_function = {name: np.zeros([b], np.float32) for name in self.functions}
        num_errors = dict.fromkeys(self.functions, 0)
        num_timeouts = dict.fromkeys(self.functions, 0)
        num_skipped = {call.name: 0 for call in batch_calls} or None
        for index, call in enumerate(calls):
            if isinstance(call, _BatchCall):
                scores = self._batch_scores(call, index in timed_out, b)
                num_errors[call.name] += scores.num_bad
                num_timeouts[call.name] += b if index in timed_out else 0
                num_skipped[call.name] = int(np.isnan(scores.values).sum())
                per_function[call.name] = fill_skipped(scores.values, prompts)
            elif index in timed_out:
                num_timeouts[call.name] += 1
                self._log_once(
                    call.name,
                    "timeout",
                    "Reward %r ran past its %.3g s limit on sample %d; it scores 0 and its thread "
                    "is abandoned (%d abandoned threads still running). Later timeouts of this "
                    "reward are counted, not logged.",
                    call.name,
                    self.timeout_s,
                    call.sample,
                    self.num_abandoned_alive,
                )
            elif call.error is not None:
                num_errors[call.name] += 1
                kind = type(call.error).__name__
                self._log_once(
                    call.name,
                    kind,
                    "Reward %r raised %s on sample %d: %s. It scores 0; later %s errors of this "
                    "reward are counted, not logged.",
                    call.name,
                    kind,
                    call.sample,
                    call.error,
                    kind,
                )
            else:
                per_function[call.name][call.sample] = call.value
        total = np.zeros([b], np.float64)
        for name, values in per_function.items():
            total += self.weights[name] * values.astype(np.float64)
        return RewardOutput(
            total.astype(np.float32),
            per_function,
            num_errors,
            num_timeouts,
            num_skipped=num_skipped,
        )

    def _batch_scores(self, call: _BatchCall, timed_out: bool, b: int) -> BatchScores:
        """The scores of a user batch reward's call under its on_error policy: raises
        `RewardFunctionError` (one line) when it stops, else NaN where it gave no value; the
        first failure of each kind is logged."""
        reward: BatchReward = call.fn
        if timed_out or call.error is not None:
            message = reward.failure(call.error, timeout_s=self.timeout_s)
            if reward.on_error == "stop" or isinstance(call.error, RewardColumnError):
                raise RewardFunctionError(message) from call.error
            kind = "timeout" if timed_out else type(call.error).__name__
            self._log_once(
                call.name,
                kind,
                "%s Its %d samples are skipped (config.rewards.on_error='skip'); later %s "
                "failures of this reward are counted, not logged.",
                message,
                b,
                kind,
            )
            return BatchScores(np.full([b], np.nan), num_bad=0 if timed_out else b)
        scores: BatchScores = call.value
        if scores.num_bad:
            self._log_once(
                call.name,
                "value",
                "Reward %r %s; %d such samples of this batch are skipped "
                "(config.rewards.on_error='skip'); later ones are counted, not logged.",
                reward.origin,
                scores.first_bad,
                scores.num_bad,
            )
        return scores

    def _run_with_time_limit(self, calls: list[_Call]) -> set[int]:
        """Runs calls in daemon threads, at most `max_concurrency` at once; returns the timed-out."""
        pending = collections.deque(range(len(calls)))
        running: dict[int, tuple[threading.Thread, float]] = {}
        done: queue.SimpleQueue = (
            queue.SimpleQueue()
        )  # this batch's only: late finishers are ignored
        timed_out: set[int] = set()
        while pending or running:
            while pending and len(running) < self.max_concurrency:
                index = pending.popleft()
                thread = threading.Thread(
                    target=_run_and_report,
                    args=(calls[index], index, done),
                    name=f"reward-{calls[index].name}-{calls[index].sample}",
                    daemon=True,
                )
                thread.start()
                running[index] = (thread, time.monotonic() + self.timeout_s)
            next_deadline = min(deadline for _, deadline in running.values())
            try:
                index = done.get(timeout=max(0.0, next_deadline - time.monotonic()))
                running.pop(index, None)
            except queue.Empty:
                now = time.monotonic()
                for index, (thread, deadline) in list(running.items()):
                    if deadline <= now:
                        del running[index]
                        timed_out.add(index)
                        self._abandoned.append(thread)
        return timed_out

    def _log_once(self, name: str, kind: str, message: str, *args) -> None:
        if (name, kind) not in self._logged:
            self._logged.add((name, kind))
            log.warning(message, *args)
