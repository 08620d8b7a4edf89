"""Reward functions written by a user, in TRL's batch shape, run by `RewardRunner`.

A user reward scores a whole batch at once, as TRL's `GRPOTrainer(reward_funcs=[...])` calls it:

    def fn(prompts: list[str], completions: list[str], **columns) -> list[float | None]

`prompts[i]` is sample i's question as the data gives it (before the chat template),
`completions[i]` the model's text, and each column a list aligned with the batch: every key of the
examples' raw records (`Example.metadata`: a JSONL line's object, reasoning-gym's entry) but
"prompt" and "completion", plus "answer", the reference answer. A function without `**columns`
gets only the columns it names as parameters; a parameter without a default is a column the data
must have (`BatchReward.check_columns`, checked on the first training example before a run
starts, and on every batch).

`None` in the returned list means "no opinion on this sample" (TRL's convention). What a failing
call does is `config.rewards.on_error` (`ON_ERROR`):

    "skip"  a sample the function gave no valid value (None, NaN, a string; every sample of a
            batch whose call raised, ran past the time limit or returned the wrong number of
            values) gets, from that function, the mean of its valid values among the samples of
            the same prompt (its group), else over the batch, else 0; the other rewards still
            score it. Counted as `reward/<name>/skipped` (errors and timeouts also under
            `/errors`, `/timeouts`); the first failure of each kind is logged. The group's mean
            leaves the group's baseline where the valid samples put it, so the function adds no
            preference for or against the sample.
    "stop"  the step raises one line naming the function and what it returned.

A column the data lacks always stops: it is a mistake in the setup, not in one sample.

Example:
  >>> def brevity(prompts, completions, answer, **columns):
  ...     return [None if a == "" else float(len(c) < 200) for c, a in zip(completions, answer)]
  >>> reward = BatchReward(brevity, name="brevity")
  >>> reward(["2 + 3 ="], ["5"], [Example("2 + 3 =", "5", "hand", 0)]).values
  array([1.])
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from jaxrl_llm.data import Example

__all__ = [
    "ON_ERROR",
    "RESERVED_NAMES",
    "BatchReward",
    "BatchRewardFn",
    "BatchScores",
    "RewardColumnError",
    "RewardFunctionError",
    "example_columns",
    "fill_skipped",
    "function_name",
]

# What a failing user reward does to a step (module docstring).
ON_ERROR = ("skip", "stop")
# Keys the run already logs as reward/<key>: the built-in rewards, the reward role's extra terms
# and the step's reward metrics. A user function named like one would overwrite it.
RESERVED_NAMES = (
    "accuracy",
    "chance",
    "errors",
    "format",
    "length",
    "mean",
    "model",
    "overlong",
    "process",
    "process_steps",
    "skipped",
    "task",
    "timeouts",
    "total",
    "zero_std_groups",
)
# Record keys that are not columns: TRL passes neither the prompt nor the completion as one.
_NOT_COLUMNS = ("prompt", "completion")


class BatchRewardFn(Protocol):
    """A user reward in TRL's batch shape: one value (or None) per completion.

    Example:
      >>> def says_answer(prompts, completions, answer, **columns):
      ...     return [float(a in c) for c, a in zip(completions, answer)]
    """

    def __call__(
        self, prompts: list[str], completions: list[str], /, **columns: list[Any]
    ) -> Sequence[float | None]: ...


class RewardFunctionError(ValueError):
    """One line naming a user reward function (or the config field that names it), what went
    wrong and the fix.

    Example:
      >>> raise RewardFunctionError("reward 'my_mod:fn' returned NaN at sample 2 ...")
    """


class RewardColumnError(RewardFunctionError):
    """A user reward asks for a column the data lacks; it stops the run whatever `on_error`.

    Example:
      >>> BatchReward(needs_topic, name="needs_topic").check_columns(["answer"])
      Traceback (most recent call last):
      RewardColumnError: reward 'needs_topic' asks for the column 'topic' ...
    """


class BatchScores(NamedTuple):
    """What one batch call of a user reward returned, checked.

    Attributes:
      values: float64 [B], NaN where the function gave no valid value.
      num_none: samples it returned None for (no opinion).
      num_bad: samples whose value was not a finite number (NaN, inf, a string ...).
      first_bad: "returned NaN at sample 2" for the first bad sample, else "".
    """

    values: np.ndarray
    num_none: int = 0
    num_bad: int = 0
    first_bad: str = ""


def function_name(fn: Callable) -> str:
    """The name a reward function is logged under: its `__name__` (a `functools.partial`'s
    function's), else its type's name.

    Example:
      >>> function_name(functools.partial(length_reward, max_words=64))
      'length_reward'
    """
    inner = getattr(fn, "func", fn)  # functools.partial
    return getattr(inner, "__name__", type(inner).__name__)


def example_columns(
    examples: Sequence[Example], *, exclude: Iterable[str] = ()
) -> dict[str, list[Any]]:
    """The columns a batch function gets: each record key (in first-seen order) as a list
    aligned with `examples` (None where a record lacks it), and "answer", the references.

    Args:
      examples: the batch's B examples.
      exclude: keys left out besides "prompt" and "completion" (the function's own names for
        its prompts and completions, which a column must not shadow).

    Returns:
      `{column: [B] values}`.

    Example:
      >>> ex = Example("2 + 3 =", "5", "hand", 0, metadata={"question": "2 + 3 =", "level": 1})
      >>> example_columns([ex])
      {'question': ['2 + 3 ='], 'level': [1], 'answer': ['5']}
    """
    skip = {*_NOT_COLUMNS, *exclude}
    records = [e.metadata if isinstance(e.metadata, Mapping) else {} for e in examples]
    keys = dict.fromkeys(k for record in records for k in record if k not in skip)
    keys.pop("answer", None)  # the reference answer comes from the example, not the raw record
    columns = {k: [record.get(k) for record in records] for k in keys}
    columns["answer"] = [e.answer for e in examples]
    return columns


def fill_skipped(values_b: np.ndarray, groups_b: Sequence[Any]) -> np.ndarray:
    """float32 [B] `values_b` with each NaN replaced by the mean of the finite values of its
    group (the samples with an equal `groups_b` key), else of the batch, else 0.

    Example:
      >>> fill_skipped(np.array([1.0, np.nan, 0.0, np.nan]), ["a", "a", "b", "c"])
      array([1. , 1. , 0. , 0.5], dtype=float32)
    """
    values = np.asarray(values_b, np.float64)
    valid = np.isfinite(values)
    if valid.all():
        return values.astype(np.float32)
    batch_mean = float(values[valid].mean()) if valid.any() else 0.0
    members: dict[Any, list[int]] = {}
    for i, key in enumerate(groups_b):
        members.setdefault(key, []).append(i)
    out = values.copy()
    for rows in members.values():
        kept = [i for i in rows if valid[i]]
        fill = float(values[kept].mean()) if kept else batch_mean
        for i in rows:
            if not valid[i]:
                out[i] = fill
    return out.astype(np.float32)


def _describe(value: Any) -> str:
    """`'abc' (str)`, `NaN`, `inf`: a bad value as a message quotes it."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{text} ({type(value).__name__})"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


@dataclasses.dataclass(frozen=True, eq=False)
class BatchReward:
    """A user's batch reward function, checked, ready for `RewardRunner`.

    `RewardRunner` runs it as one call over the whole batch in a thread under its time limit
    and applies `on_error` to what fails (module docstring).

    Attributes:
      fn: `fn(prompts, completions, **columns) -> list[float | None]`.
      name: what it is logged under (`reward/<name>`), by default its `__name__`.
      origin: how it was named, for messages ("my_mod:fn", "rewards.py:fn"); default
        "<module>:<qualified name>".
      on_error: "skip" or "stop" (`ON_ERROR`).

    Example:
      >>> reward = BatchReward(says_answer, origin="my_mod:says_answer", on_error="stop")
      >>> reward(["2 + 3 ="], ["It is 5"], [Example("2 + 3 =", "5", "hand", 0)]).values
      array([1.])
    """

    fn: Callable[..., Sequence[float | None]]
    name: str = ""
    origin: str = ""
    on_error: str = "skip"

    def __post_init__(self):
        if not callable(self.fn):
            raise RewardFunctionError(
                f"reward {self.origin or self.name!r} is a {type(self.fn).__name__}, not a "
                "function: give fn(prompts, completions, **columns) -> list[float | None]."
            )
        if not self.name:
            object.__setattr__(self, "name", function_name(self.fn))
        if not self.origin:
            inner = getattr(self.fn, "func", self.fn)
            qualname = getattr(inner, "__qualname__", self.name)
            object.__setattr__(self, "origin", f"{getattr(inner, '__module__', '?')}:{qualname}")
        if self.on_error not in ON_ERROR:
            raise RewardFunctionError(
                f"BatchReward(on_error={self.on_error!r}) for reward {self.origin!r} must be "
                f"one of {ON_ERROR}."
            )
        if not self.name.isidentifier():
            raise RewardFunctionError(
                f"reward {self.origin!r} would be logged as reward/{self.name}: give it a name "
                "that is a Python identifier (define it with def, or pass {name: fn})."
            )
        if self.name in RESERVED_NAMES:
            raise RewardFunctionError(
                f"reward {self.origin!r} is named {self.name!r}, which the run already logs as "
                f"reward/{self.name}: rename the function (taken: {', '.join(RESERVED_NAMES)})."
            )
        object.__setattr__(self, "_signature", self._read_signature())

    def _read_signature(self) -> tuple[tuple[str, str], bool, tuple[str, ...], tuple[str, ...]]:
        """(names of its prompts and completions parameters, whether it takes **columns, the
        columns it names, those of them without a default)."""
        try:
            params = list(inspect.signature(self.fn).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature: pass every column
            return ("prompts", "completions"), True, (), ()
        kinds = inspect.Parameter
        positional = [
            p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
        ]
        if len(positional) < 2 and not any(p.kind == kinds.VAR_POSITIONAL for p in params):
            raise RewardFunctionError(
                f"reward {self.origin!r} takes {len(positional)} positional parameters: a "
                "reward takes the whole batch, fn(prompts, completions, **columns)."
            )
        batch_args = tuple(p.name for p in positional[:2]) or ("prompts", "completions")
        named = [
            p
            for p in params[len(batch_args) :]
            if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
        ]
        takes_all = any(p.kind == kinds.VAR_KEYWORD for p in params)
        required = tuple(p.name for p in named if p.default is inspect.Parameter.empty)
        return batch_args, takes_all, tuple(p.name for p in named), required

    @property
    def required_columns(self) -> tuple[str, ...]:
        """The columns it names as parameters without a default."""
        return self._signature[3]

    def check_columns(self, available: Iterable[str]) -> None:
        """Raises `RewardColumnError` when a column it needs is not in `available`.

        Example:
          >>> reward.check_columns(example_columns([train_source[0]]))
        """
        available = list(available)
        missing = [c for c in self.required_columns if c not in available]
        if not missing:
            return
        hint = (
            " (it looks like a per-sample reward (prompt, completion, example): a reward "
            "here takes the whole batch, fn(prompts, completions, **columns))"
            if missing[0] == "example"
            else ""
        )
        raise RewardColumnError(
            f"reward {self.origin!r} asks for the column {missing[0]!r} (a parameter without a "
            f"default) that the data lacks{hint}; the data's columns: {available}: add the "
            "column to the data, or give the parameter a default."
        )

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Example]
    ) -> BatchScores:
        """Calls the function once on the batch and checks what it returned.

        Args:
          prompts: B rendered prompts (unused: the function gets each example's question).
          completions: B completion texts.
          examples: B examples (their questions, answers and raw records).

        Returns:
          `BatchScores` with float64 [B] values.

        Raises:
          RewardColumnError: a column it needs is missing.
          RewardFunctionError: it returned no list of B values; or, under on_error="stop", a
            value that is not a finite number.
          Exception: whatever the function raised.
        """
        del prompts  # rendered with the chat template; the user's prompts are the questions
        (prompts_arg, completions_arg), takes_all, named, _ = self._signature
        columns = example_columns(examples, exclude=(prompts_arg, completions_arg))
        self.check_columns(columns)
        if not takes_all:
            columns = {k: v for k, v in columns.items() if k in named}
        returned = self.fn([e.question for e in examples], list(completions), **columns)
        return self.check_returned(returned, len(completions))

    def check_returned(self, returned: Any, batch_size: int) -> BatchScores:
        """`BatchScores` of what the function returned for a batch of `batch_size`."""
        if isinstance(returned, np.ndarray) and returned.ndim == 1:
            returned = returned.tolist()
        if isinstance(returned, (str, bytes, Mapping)) or not isinstance(returned, Sequence):
            raise RewardFunctionError(
                f"reward {self.origin!r} returned {_describe(returned)} for a batch of "
                f"{batch_size}: return a list of {batch_size} floats (None: no opinion on "
                "that sample)."
            )
        if len(returned) != batch_size:
            raise RewardFunctionError(
                f"reward {self.origin!r} returned {len(returned)} values for a batch of "
                f"{batch_size}: return one float (or None) per completion."
            )
        values = np.full([batch_size], np.nan, np.float64)
        num_none = num_bad = 0
        first_bad = ""
        for i, value in enumerate(returned):
            if value is None:
                num_none += 1
                continue
            number = isinstance(value, (numbers.Real, np.bool_))
            if number and math.isfinite(float(value)):
                values[i] = float(value)
                continue
            num_bad += 1
            if not first_bad:
                first_bad = f"returned {_describe(value)} at sample {i}"
                if self.on_error == "stop":
                    raise RewardFunctionError(
                        f"reward {self.origin!r} {first_bad} (batch of {batch_size}): return "
                        "a finite float, or None for no opinion (config.rewards.on_error="
                        "'skip' skips such samples instead of stopping)."
                    )
        return BatchScores(values, num_none, num_bad, first_bad)

    def failure(self, error: BaseException | None, *, timeout_s: float | None = None) -> str:
        """One line for a whole batch call that failed: `error` raised, or (None) it ran past
        `timeout_s`."""
        if error is None:
            return (
                f"reward {self.origin!r} ran past its {timeout_s:g} s limit: bound its work, or "
                "raise config.rewards.timeout_s (the limit of one batch call)."
            )
        if isinstance(error, RewardFunctionError):
            return str(error)
        return (
            f"reward {self.origin!r} raised {type(error).__name__}: {_first_line(error)} (fix "
            "the function; config.rewards.on_error='skip' skips a failing batch instead)."
        )
