"""A small name -> factory registry of algorithms; no hub module lists them.

Each algorithm module calls `register` once, at import, with three functions:

  default_config()  -> {section: ConfigDict}: the config sections it adds to the base config
                       (every algorithm has "loss"; PPO also "critic")
  validate(config)  -> None or ValueError naming the field and the fix
  make(config)      -> `Algorithm`

`get(name)` imports `jaxrl_llm.algorithms.<name>` on first use, so a new algorithm is one new
file under `algorithms/` (plus its config and tests): nothing else has to list it. Algorithms
defined elsewhere (a notebook, a research repo) call `register` themselves.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

import ml_collections

from jaxrl_llm.algorithms.base import Algorithm, check_algorithm

_BUILTIN = ("grpo", "ppo", "reinforce_pp", "remax", "online_dpo", "rrhf")


class AlgorithmSpec(NamedTuple):
    """A registered algorithm: its config sections, their validation and its factory."""

    name: str
    make: Callable[[ml_collections.ConfigDict], Algorithm]
    default_config: Callable[[], dict[str, ml_collections.ConfigDict]]
    validate: Callable[[ml_collections.ConfigDict], None]


_REGISTRY: dict[str, AlgorithmSpec] = {}


def _no_checks(config) -> None:
    del config


def register(
    name: str,
    *,
    make: Callable[[ml_collections.ConfigDict], Algorithm],
    default_config: Callable[[], dict[str, Any]],
    validate: Callable[[ml_collections.ConfigDict], None] = _no_checks,
) -> AlgorithmSpec:
    """Registers an algorithm under `name` (again with the same name replaces it).

    Example:
      >>> register("my_pg", make=make_my_pg, default_config=lambda: {"loss": my_loss_config()})
    """
    spec = AlgorithmSpec(name, make, default_config, validate)
    _REGISTRY[name] = spec
    return spec


def names() -> list[str]:
    """Registered names (the built-in ones are imported first)."""
    for builtin in _BUILTIN:
        _import(builtin)
    return sorted(_REGISTRY)


def _import(name: str) -> None:
    if name in _REGISTRY:
        return
    try:
        importlib.import_module(f"jaxrl_llm.algorithms.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"jaxrl_llm.algorithms.{name}":
            raise


def get(name: str) -> AlgorithmSpec:
    """The registered spec of `name`, importing `jaxrl_llm.algorithms.<name>` if needed.

    Raises:
      KeyError: unknown name, with the registered names and close matches.
    """
    _import(name)
    if name not in _REGISTRY:
        known = names()
        close = difflib.get_close_matches(name, known, n=2, cutoff=0.5)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        raise KeyError(
            f"Unknown algorithm {name!r} (config.algorithm).{hint} Registered: {', '.join(known)}."
        )
    return _REGISTRY[name]


def make(config: ml_collections.ConfigDict) -> Algorithm:
    """The `Algorithm` named by `config.algorithm`, built from the config (checked), with
    turn-level credit for multi-turn episodes when `config.env.credit == "turn"`
    (`jaxrl_llm.algorithms.turn_credit`), under `config.constraints` when the run has some
    (`jaxrl_llm.algorithms.constrained`)."""
    from jaxrl_llm.algorithms.constrained import constrain
    from jaxrl_llm.constraints.config import constraint_spec

    algorithm = check_algorithm(get(config.algorithm).make(config))
    if "env" in config and config.env.name and config.env.credit == "turn":
        from jaxrl_llm.algorithms.turn_credit import with_turn_credit

        algorithm = with_turn_credit(algorithm, gamma=config.env.turn_discount)
    spec = constraint_spec(config) if "constraints" in config else None
    return algorithm if spec is None else constrain(algorithm, spec)
