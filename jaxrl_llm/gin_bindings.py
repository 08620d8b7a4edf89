"""gin bindings for the runner's hyper-parameters; the one module that registers configurables.

The library's functions stay plain. This module registers a few of them with gin
(`gin.external_configurable`), and the runner builds its parts through `configured` / `resolve`,
so a gin file can change a run without touching its ml_collections config:

    # experiments/gin/clip_rloo.gin
    GRPOLossConfig.clip_low = 0.1
    GRPOLossConfig.clip_high = 0.15
    group_advantages.estimator = "rloo"

    python -m jaxrl_llm.main --config experiments/configs/grpo_tiny.py --workdir runs/x \\
        --gin_file experiments/gin/clip_rloo.gin --gin_bindings 'make_optimizer.b2 = 0.95'

What is registered (the runner builds each through this module; config defaults in brackets):

  GRPOLossConfig      clip_low, clip_high, kl_beta, kl_estimator, entropy_coef, agg, norm_len,
                      logprob_implementation, remat                        [config.loss]
  group_advantages    estimator ("grpo" or "rloo"), normalize_std           [config.loss]
  make_optimizer      learning_rate, warmup_steps, total_steps, schedule, weight_decay, b1, b2,
                      eps, max_grad_norm                                   [config.optimizer]
  RewardRunner        functions, weights, timeout_s, max_concurrency       [config.rewards]
  task_reward, format_reward, math_verify_reward
                      their keyword arguments (format_reward.max_chars); in a binding they are
                      referred to as @task_reward, @format_reward, @math_verify_reward

Precedence: the config file (with its command-line overrides) gives the defaults, and a gin
binding wins over the config field it shadows. The runner prints one line per shadowed field
(`gin: GRPOLossConfig.clip_low = 0.1 overrides 0.2`), and `jaxrl_llm.main` saves
the parsed bindings to `WORKDIR/config.gin` next to `config.json`. `GRPOLossConfig.temperature`
is not bindable: the trainer's log-probs must use the rollout temperature
(`config.rollout.temperature`).

Your own functions (a custom loss in a notebook) can join with `register(fn)` and be called
with `configured(fn, **defaults)`.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gin

from jaxrl_llm.algorithms.grpo import GRPOLossConfig, group_advantages
from jaxrl_llm.losses.aggregation import AGG_MODES
from jaxrl_llm.losses.kl import KL_ESTIMATORS
from jaxrl_llm.rewards import RewardRunner, format_reward, math_verify_reward, task_reward
from jaxrl_llm.training.optimizer import SCHEDULES, make_optimizer

_MODULE = "jaxrl_llm"

# name -> (object, gin keyword arguments: allowlist or None for all, denylist).
_RUNNER_CONFIGURABLES: dict[str, tuple[Any, Sequence[str] | None, Sequence[str]]] = {
    "GRPOLossConfig": (GRPOLossConfig, None, ("temperature",)),
    "group_advantages": (group_advantages, ("estimator", "normalize_std"), ()),
    "make_optimizer": (make_optimizer, None, ()),
    "RewardRunner": (RewardRunner, ("functions", "weights", "timeout_s", "max_concurrency"), ()),
    "task_reward": (task_reward, None, ()),
    "format_reward": (format_reward, None, ()),
    "math_verify_reward": (math_verify_reward, None, ()),
}

# Values checked when a binding is resolved, so a bad one fails before the first step.
_CHOICES: dict[tuple[str, str], Sequence[str]] = {
    ("group_advantages", "estimator"): ("grpo", "rloo"),
    ("GRPOLossConfig", "agg"): AGG_MODES,
    ("GRPOLossConfig", "kl_estimator"): KL_ESTIMATORS,
    ("make_optimizer", "schedule"): SCHEDULES,
}

# Registered objects (original, unwrapped) -> their gin name.
_NAMES: dict[Any, str] = {}
_REPORTED: set[tuple[str, str, str]] = set()


class GinConfigError(ValueError):
    """A gin file or binding could not be parsed or names something unknown."""


def register(
    fn_or_cls, *, name: str | None = None, module: str = _MODULE, allowlist=None, denylist=None
):
    """Registers a plain function or class with gin (idempotent); returns the original object.

    Use it for your own functions, e.g. a custom loss in a notebook, then build them with
    `configured(fn, **defaults)` so bindings such as `my_loss.clip = 0.1` take effect.
    """
    name = name or fn_or_cls.__name__
    if _NAMES.get(fn_or_cls) == name:
        return fn_or_cls
    gin.external_configurable(
        fn_or_cls, name=name, module=module, allowlist=allowlist, denylist=denylist
    )
    _NAMES[fn_or_cls] = name
    return fn_or_cls


for _name, (_obj, _allow, _deny) in _RUNNER_CONFIGURABLES.items():
    register(_obj, name=_name, allowlist=_allow, denylist=list(_deny) or None)


def configurables() -> list[str]:
    """The names of everything registered here (the runner's configurables and `register`ed ones)."""
    return sorted(set(_NAMES.values()))


def _lookup(fn_or_name) -> tuple[Any, str]:
    if isinstance(fn_or_name, str):
        for obj, name in _NAMES.items():
            if name == fn_or_name:
                return obj, name
        raise KeyError(
            f"gin: {fn_or_name!r} is not registered; registered: {', '.join(configurables())}."
        )
    if fn_or_name not in _NAMES:
        raise KeyError(
            f"gin: {getattr(fn_or_name, '__name__', fn_or_name)!r} is not registered; call "
            "jaxrl_llm.gin_bindings.register(fn) first."
        )
    return fn_or_name, _NAMES[fn_or_name]


def bindings(fn_or_name) -> dict[str, Any]:
    """The keyword arguments gin binds for a registered function or class (references resolved)."""
    obj, _ = _lookup(fn_or_name)
    return dict(gin.get_bindings(obj))


def _check_choices(name: str, kwargs: Mapping[str, Any]) -> None:
    for (configurable, param), choices in _CHOICES.items():
        if configurable == name and param in kwargs and kwargs[param] not in choices:
            raise GinConfigError(
                f"gin: {name}.{param}={kwargs[param]!r} must be one of {tuple(choices)}."
            )
    if (
        name == "GRPOLossConfig"
        and kwargs.get("agg") == "seq-mean-token-sum-norm"
        and not kwargs.get("norm_len")
    ):
        raise GinConfigError(
            "gin: GRPOLossConfig.agg='seq-mean-token-sum-norm' needs GRPOLossConfig.norm_len "
            "(Dr. GRPO's constant, e.g. config.rollout.max_new_tokens)."
        )


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resolve(fn_or_name, /, **defaults) -> dict[str, Any]:
    """The keyword arguments to call a registered function with: `defaults`, then gin's bindings.

    `defaults` are the values the config file gives; a gin binding of the same name wins (and is
    reported once per process when it differs). Bound names absent from `defaults` are added.

    Example:
      >>> gin.parse_config("group_advantages.estimator = 'rloo'")
      >>> resolve("group_advantages", estimator="grpo", normalize_std=True)
      {'estimator': 'rloo', 'normalize_std': True}
    """
    _, name = _lookup(fn_or_name)
    bound = bindings(fn_or_name)
    for key, value in bound.items():
        if key in defaults and defaults[key] != value and (name, key, repr(value)) not in _REPORTED:
            _REPORTED.add((name, key, repr(value)))
            print(
                f"[jaxrl_llm] gin: {name}.{key} = {_short(value)} overrides {_short(defaults[key])}"
            )
    kwargs = {**defaults, **bound}
    if name == "GRPOLossConfig" and "agg" in bound and "norm_len" not in bound:
        # norm_len only means something for Dr. GRPO's mode; follow the bound `agg`.
        if kwargs["agg"] != "seq-mean-token-sum-norm":
            kwargs["norm_len"] = None
    _check_choices(name, kwargs)
    return kwargs


def configured(fn_or_name, /, *args, **defaults):
    """Calls a registered function or class with `resolve(fn, **defaults)` (gin wins).

    Example:
      >>> loss_config = configured(GRPOLossConfig, clip_low=0.2, clip_high=0.28)
    """
    obj, _ = _lookup(fn_or_name)
    return obj(*args, **resolve(fn_or_name, **defaults))


def bound(fn: Callable) -> Callable:
    """`fn` with its gin-bound keyword arguments applied (itself when nothing is bound)."""
    kwargs = bindings(fn)
    return functools.partial(fn, **kwargs) if kwargs else fn


def _hint(message: str) -> str:
    names = configurables()
    for word in message.replace("'", " ").replace('"', " ").split():
        base = word.split(".")[0]
        if base and base not in names:
            close = difflib.get_close_matches(base, names, n=2, cutoff=0.6)
            if close:
                return f" Did you mean {' or '.join(close)}?"
    return ""


def parse(gin_files: Iterable[str] = (), gin_bindings: Iterable[str] = ()) -> str:
    """Parses gin files then bindings (later ones win); returns the parsed config as gin text.

    Raises:
      GinConfigError: a missing file, a syntax error, or an unknown configurable or parameter,
        with the registered names (and close matches) in the message.
    """
    gin_files, gin_bindings = list(gin_files), list(gin_bindings)
    try:
        gin.parse_config_files_and_bindings(gin_files, gin_bindings, finalize_config=False)
    except OSError as e:
        raise GinConfigError(f"gin: cannot read a gin file: {e}") from e
    except (ValueError, SyntaxError, TypeError) as e:
        message = " ".join(str(e).split())
        if "temperature" in message:
            message += " (the trainer's temperature is config.rollout.temperature)"
        raise GinConfigError(
            f"gin: {message}.{_hint(message)} Configurables: {', '.join(configurables())}."
        ) from e
    return gin.config_str()


def clear() -> None:
    """Forgets all parsed bindings (registrations stay); for notebooks and tests."""
    gin.clear_config()
    _REPORTED.clear()
