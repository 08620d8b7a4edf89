"""Name -> value registries whose values register themselves from their own modules.

The algorithms (`config.algorithm`) and the episode tasks (`config.env.name`) are each found by
name in one: a module calls `register` once, at import, and `get(name)` imports
`<package>.<name>` on first use, so nothing has to list them.

    tasks = NameRegistry("episode task", "config.env.name", "jaxrl_llm.envs.tasks",
                         modules=lambda: ["calculator", "multi_if"])
    tasks.register("echo", spec)           # in jaxrl_llm/envs/tasks/echo.py, at import
    tasks.get("echo")                      # imports jaxrl_llm.envs.tasks.echo if needed
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

__all__ = ["NameRegistry"]

V = TypeVar("V")


class NameRegistry(Generic[V]):
    """Registered values by name.

    Args:
      kind: what the values are, for errors ("algorithm", "episode task").
      field: the config field that names one, for errors ("config.algorithm").
      package: where `<package>.<name>` defines (and registers) the built-in value `name`.
      modules: `() -> names` of the built-in modules, imported by `names()` so that every
        built-in value is listed.
    """

    def __init__(self, kind: str, field: str, package: str, modules: Callable[[], Iterable[str]]):
        self.kind, self.field, self.package, self.modules = kind, field, package, modules
        self._values: dict[str, V] = {}

    def register(self, name: str, value: V) -> V:
        """Registers `value` under `name` (again with the same name replaces it)."""
        self._values[name] = value
        return value

    def names(self) -> list[str]:
        """Registered names (the built-in modules are imported first)."""
        for module in self.modules():
            self._import(module)
        return sorted(self._values)

    def find(self, name: str) -> V | None:
        """The value of `name` (importing `<package>.<name>` if needed), or None."""
        self._import(name)
        return self._values.get(name)

    def get(self, name: str) -> V:
        """The value of `name`, importing `<package>.<name>` if needed.

        Raises:
          KeyError: an unknown name, with the registered names and close matches.
        """
        value = self.find(name)
        if value is None:
            known = self.names()
            close = difflib.get_close_matches(name, known, n=2, cutoff=0.5)
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            raise KeyError(
                f"{self.field}={name!r} is not a registered {self.kind}.{hint} Registered: "
                f"{', '.join(known)}."
            )
        return value

    def _import(self, name: str) -> None:
        if name in self._values or not name.isidentifier():
            return
        module = f"{self.package}.{name}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
