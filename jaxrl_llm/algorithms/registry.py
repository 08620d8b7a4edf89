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

from collections.abc import Callable
from typing import Any, NamedTuple

import ml_collections

from jaxrl_llm.algorithms.base import Algorithm, check_algorithm
from jaxrl_llm.name_registry import NameRegistry

_BUILTIN = ("grpo", "ppo", "reinforce_pp", "remax", "online_dpo", "rrhf")


class AlgorithmSpec(NamedTuple):
    """A registered algorithm: its config sections, their validation and its factory."""

    name: str
    make: Callable[[ml_collections.ConfigDict], Algorithm]
    default_config: Callable[[], dict[str, ml_collections.ConfigDict]]
    validate: Callable[[ml_collections.ConfigDict], None]


_REGISTRY: NameRegistry[AlgorithmSpec] = NameRegistry(
    "algorithm", "config.algorithm", "jaxrl_llm.algorithms", modules=lambda: _BUILTIN
)


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
    return _REGISTRY.register(name, AlgorithmSpec(name, make, default_config, validate))


# `names()`: the registered names, the built-in ones imported first; `get(name)`: the spec,
# importing `jaxrl_llm.algorithms.<name>` if needed (a KeyError lists the registered names).
names = _REGISTRY.names
get = _REGISTRY.get


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
