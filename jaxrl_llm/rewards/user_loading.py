"""Finding a user's reward functions: "module:function" and "file.py:function" strings of
`config.rewards.functions`, Python callables, their weights, and the columns they need.

Example:
  >>> rewards, weights = user_rewards("my_rewards:brevity,./extra.py:cites", "1.0,0.5")
  >>> list(rewards), weights
  (['brevity', 'cites'], {'brevity': 1.0, 'cites': 0.5})
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping, Sequence

from jaxrl_llm.data import Example
from jaxrl_llm.rewards.user import (
    BatchReward,
    RewardFunctionError,
    example_columns,
    function_name,
)
from jaxrl_llm.user_imports import import_module_or_file

__all__ = [
    "UserRewardFns",
    "check_reward_columns",
    "load_reward_function",
    "parse_function_specs",
    "parse_function_weights",
    "user_rewards",
]

# A Python caller's reward functions: callables named by their `__name__`, or `{name: fn}`.
UserRewardFns = Sequence[Callable] | Mapping[str, Callable]

FUNCTIONS_FIELD = "config.rewards.functions"
WEIGHTS_FIELD = "config.rewards.function_weights"


def parse_function_specs(text: str, *, field: str = FUNCTIONS_FIELD) -> list[str]:
    """The comma-separated "package.module:function" / "path/to/file.py:function" entries of
    `text`, each checked for its form (not imported).

    Example:
      >>> parse_function_specs("my_rewards:brevity, rewards/extra.py:cites")
      ['my_rewards:brevity', 'rewards/extra.py:cites']
    """
    specs = [s.strip() for s in text.split(",") if s.strip()]
    for spec in specs:
        target, _, attr = spec.rpartition(":")
        if not target or not attr.isidentifier():
            raise RewardFunctionError(
                f"{field}: {spec!r} is not 'package.module:function' or "
                "'path/to/file.py:function': write the module or file, a colon, and the "
                "function's name."
            )
    return specs


def parse_function_weights(text: str, count: int, *, field: str = WEIGHTS_FIELD) -> list[float]:
    """`count` weights from comma-separated `text` ("" = 1.0 each).

    Example:
      >>> parse_function_weights("1, 0.5", 2), parse_function_weights("", 3)
      ([1.0, 0.5], [1.0, 1.0, 1.0])
    """
    entries = [w.strip() for w in text.split(",") if w.strip()]
    if not entries:
        return [1.0] * count
    try:
        weights = [float(w) for w in entries]
    except ValueError:
        raise RewardFunctionError(
            f"{field}={text!r} must be comma-separated numbers (one per reward function)."
        ) from None
    if len(weights) != count:
        raise RewardFunctionError(
            f"{field}={text!r} gives {len(weights)} weights for {count} reward functions "
            "(config.rewards.functions, then the Python callables): give one per function, or "
            "none for 1.0 each."
        )
    return weights


def load_reward_function(spec: str, *, field: str = FUNCTIONS_FIELD) -> Callable:
    """The function named by "package.module:function" or "path/to/file.py:function" (a path
    relative to the working directory, or absolute), imported as `--import` does
    (`jaxrl_llm.user_imports.import_module_or_file`).

    Raises:
      ValueError: one line naming `field`, the entry and the fix: the module does not import
        (with its error), the file does not exist (`import_module_or_file`'s); a
        `RewardFunctionError` when the name is not in the module or is not callable.

    Example:
      >>> load_reward_function("my_rewards:brevity")
      <function brevity at 0x...>
    """
    (spec,) = parse_function_specs(spec, field=field)
    target, _, attr = spec.rpartition(":")
    if not target.endswith(".py") and ("/" in target or os.sep in target):
        raise RewardFunctionError(
            f"{field}: {spec!r}: {target} is a path but not a .py file: name the file "
            f"'{target}.py:{attr}' or the module 'package.module:{attr}'."
        )
    module = import_module_or_file(target, flag=f"{field}: {spec!r}: module")
    if not hasattr(module, attr):
        names = [n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n])]
        close = difflib.get_close_matches(attr, names, 1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise RewardFunctionError(
            f"{field}: {spec!r}: {target} has no {attr!r} ({hint}its functions: "
            f"{', '.join(sorted(names)) or 'none'})."
        )
    fn = getattr(module, attr)
    if not callable(fn):
        raise RewardFunctionError(
            f"{field}: {spec!r} is a {type(fn).__name__}, not a function: name a function "
            "fn(prompts, completions, **columns) -> list[float | None]."
        )
    return fn


def user_rewards(
    functions: str = "",
    function_weights: str = "",
    reward_fns: UserRewardFns | None = None,
    *,
    on_error: str = "skip",
) -> tuple[dict[str, BatchReward], dict[str, float]]:
    """The user's reward functions of a run, checked, with their weights.

    Args:
      functions: `config.rewards.functions`, comma-separated "module:function" entries.
      function_weights: `config.rewards.function_weights`, aligned with `functions` followed by
        `reward_fns` ("" = 1.0 each).
      reward_fns: Python callables, named by their `__name__`, or `{name: fn}`.
      on_error: `config.rewards.on_error` ("skip" or "stop").

    Returns:
      `({name: BatchReward}, {name: weight})` in order: `functions`, then `reward_fns`.

    Raises:
      RewardFunctionError: an entry does not load, two functions share a name, a name is taken
        by a built-in reward, the weights do not match.

    Example:
      >>> rewards, weights = user_rewards("", "", [brevity])
      >>> rewards["brevity"].origin, weights
      ('my_notebook:brevity', {'brevity': 1.0})
    """
    entries = [
        (function_name(fn := load_reward_function(spec)), fn, spec)
        for spec in parse_function_specs(functions)
    ]
    if isinstance(reward_fns, Mapping):
        entries += [(name, fn, "") for name, fn in reward_fns.items()]
    else:
        entries += [(function_name(fn), fn, "") for fn in reward_fns or ()]
    weights = parse_function_weights(function_weights, len(entries))
    rewards: dict[str, BatchReward] = {}
    for name, fn, origin in entries:
        reward = BatchReward(fn, name=name, origin=origin, on_error=on_error)
        if reward.name in rewards:
            raise RewardFunctionError(
                f"two reward functions are named {reward.name!r} ({rewards[reward.name].origin} "
                f"and {reward.origin}): rename one, or pass reward_fns as {{name: fn}}."
            )
        rewards[reward.name] = reward
    return rewards, dict(zip(rewards, weights, strict=True))


def check_reward_columns(functions: Mapping[str, Callable], example: Example) -> None:
    """Raises `RewardColumnError` when a user reward among `functions` (a runner's) needs a
    column that `example` (the data's first) lacks; built-in rewards are not checked.

    Example:
      >>> check_reward_columns(runner.functions, train_source[0])
    """
    columns = list(example_columns([example]))
    for fn in functions.values():
        if isinstance(fn, BatchReward):
            fn.check_columns(columns)
