"""gin at the edge: bindings that edit the run config, and leaf functions gin may configure.

gin does not sit between runners and algorithms: nothing registers an algorithm with it. Each
top-level section of the run config is a gin configurable of the same name, and a binding sets
the config field it names, before validation, exactly as a `--config.section.field=value` flag:

    # experiments/gin/clip_rloo.gin
    loss.clip_low = 0.1
    loss.clip_high = 0.15
    loss.advantage = "rloo"

    python -m jaxrl_llm.main --config experiments/configs/grpo_tiny.py --workdir runs/x \\
        --gin_file experiments/gin/clip_rloo.gin --gin_bindings 'optimizer.b2 = 0.95'

Precedence: a gin binding wins over the config file and its command-line overrides; the run
prints one line per changed field (`gin: loss.clip_low = 0.1 overrides 0.2`) and `jaxrl_llm.main`
saves the parsed bindings to `WORKDIR/config.gin`. An unknown section or field fails with close
matches. The reward functions (`task_reward`, `exact_task_reward`, `format_reward`, `math_verify_reward`) are the
only functions registered: their keyword arguments are bindable (`format_reward.max_chars = 40`).
Your own functions (a custom loss in a notebook) join with `register(fn)` and are called with
`configured(fn, **defaults)` or `resolve(fn, **defaults)`.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Iterable
from typing import Any

import gin
import ml_collections

from jaxrl_llm.rewards import exact_task_reward, format_reward, math_verify_reward, task_reward

_MODULE = "jaxrl_llm"

# Every top-level section a run config may have (base, and the algorithms' own sections).
CONFIG_SECTIONS = (
    "model",
    "task",
    "rewards",
    "rollout",
    "loss",
    "critic",
    "optimizer",
    "train",
    "eval",
    "placement",
)

# Names of the configurables gin had before it moved to the edge, and where they went.
_MOVED = {
    "GRPOLossConfig": "loss",
    "group_advantages": "loss (loss.advantage, loss.normalize_std)",
    "make_optimizer": "optimizer",
    "RewardRunner": "rewards (rewards.task_weight, rewards.format_weight, rewards.timeout_s)",
}

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


def _section_configurable(name: str) -> Callable[..., dict[str, Any]]:
    def section(**fields):
        return fields

    section.__name__ = name
    section.__doc__ = f"The `config.{name}` section (gin bindings set its fields)."
    return section


_SECTIONS = {name: register(_section_configurable(name)) for name in CONFIG_SECTIONS}
for _fn in (task_reward, exact_task_reward, format_reward, math_verify_reward):
    register(_fn)


def configurables() -> list[str]:
    """The names gin knows here: config sections, reward functions and `register`ed ones."""
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


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _report(name: str, key: str, old: Any, new: Any) -> None:
    if old != new and (name, key, repr(new)) not in _REPORTED:
        _REPORTED.add((name, key, repr(new)))
        print(f"[jaxrl_llm] gin: {name}.{key} = {_short(new)} overrides {_short(old)}")


def resolve(fn_or_name, /, **defaults) -> dict[str, Any]:
    """The keyword arguments to call a registered function with: `defaults`, then gin's bindings.

    A gin binding of the same name wins (and is reported once per process when it differs).

    Example:
      >>> register(my_loss); parse([], ["my_loss.clip = 0.1"])
      >>> resolve(my_loss, clip=0.2, coef=1.0)
      {'clip': 0.1, 'coef': 1.0}
    """
    _, name = _lookup(fn_or_name)
    bound = bindings(fn_or_name)
    for key, value in bound.items():
        if key in defaults:
            _report(name, key, defaults[key], value)
    return {**defaults, **bound}


def configured(fn_or_name, /, *args, **defaults):
    """Calls a registered function or class with `resolve(fn, **defaults)` (gin wins)."""
    obj, _ = _lookup(fn_or_name)
    return obj(*args, **resolve(fn_or_name, **defaults))


def bound(fn: Callable) -> Callable:
    """`fn` with its gin-bound keyword arguments applied (itself when nothing is bound)."""
    kwargs = bindings(fn)
    return functools.partial(fn, **kwargs) if kwargs else fn


def apply_to_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Sets every bound `section.field` on `config` (in place; gin wins), reporting changes.

    Raises:
      GinConfigError: a binding names a section this config lacks or a field its section lacks
        (with close matches).
    """
    for section in CONFIG_SECTIONS:
        bound_fields = bindings(section)
        if not bound_fields:
            continue
        if section not in config:
            raise GinConfigError(
                f"gin: this config has no section {section!r} (config.algorithm="
                f"{config.get('algorithm')!r}); sections: {', '.join(sorted(config.keys()))}."
            )
        node = config[section]
        for key, value in bound_fields.items():
            if key not in node:
                close = difflib.get_close_matches(key, list(node.keys()), n=2, cutoff=0.6)
                hint = f" Did you mean {section}.{' or '.join(close)}?" if close else ""
                raise GinConfigError(f"gin: config.{section} has no field {key!r}.{hint}")
            if isinstance(node[key], tuple) and isinstance(value, list):
                value = tuple(value)
            _report(section, key, node[key], value)
            node[key] = value
    return config


def _hint(message: str) -> str:
    names = configurables()
    for word in message.replace("'", " ").replace('"', " ").split():
        base = word.split(".")[0]
        if base in _MOVED:
            return f" {base} is now a config section: bind {_MOVED[base]} instead."
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
        raise GinConfigError(
            f"gin: {message}.{_hint(message)} Configurables: {', '.join(configurables())}."
        ) from e
    return gin.config_str()


def clear() -> None:
    """Forgets all parsed bindings (registrations stay); for notebooks and tests."""
    gin.clear_config()
    _REPORTED.clear()
