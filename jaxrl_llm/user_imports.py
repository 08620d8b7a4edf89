"""`--import MODULE`: a researcher's own module, loaded before a command line reads its config.

A module that registers a task preset, a held-out scorer, an algorithm, an episode task or an
environment (`register_preset`, `register_scorer`, `algorithms.register`, `tasks.register`, ...)
must run before the config that names them is loaded and checked. Every command line
(`jaxrl_llm.main`, `.evaluate`, `.launch`, `.plan`, `.report`) takes `--import` (repeatable): a
dotted module name on `sys.path` (`my_lab.tasks`) or the path of a `.py` file
(`experiments/my_task.py`, imported under its file name, its folder put on `sys.path` so that
its own sibling imports work). The imports happen before flag parsing (`import_from_argv`), so a
config file may already use what they register.

A run records its imports in `<workdir>/imports.json` (`record_imports`), and `evaluate
--workdir`, a resumed `main` and the sweep launcher's trials import them again
(`recorded_imports`): a run trained on a user's task is evaluated without repeating the flag.

    python -m jaxrl_llm.main --import my_lab.tasks --config my_config.py --workdir runs/mine
    python -m jaxrl_llm.evaluate --workdir runs/mine        # imports my_lab.tasks itself
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = [
    "IMPORTS_FILE",
    "add_import_option",
    "import_all",
    "import_from_argv",
    "import_from_argv_or_exit",
    "import_module_or_file",
    "imports_in_argv",
    "record_imports",
    "recorded_imports",
]

IMPORTS_FILE = "imports.json"
FLAG = "--import"


def _canonical(name: str) -> str:
    """A file path made absolute (so a recorded import works from any directory); a dotted
    module name as given."""
    return os.path.abspath(name) if name.endswith(".py") else name


def import_module_or_file(name: str, *, flag: str = FLAG) -> ModuleType:
    """Imports a dotted module name or a `.py` file path; returns the module.

    Raises:
      ValueError: in one line naming the flag, the module and its error, and the fix (a file
        that does not exist, a module not on `sys.path`, or one whose own code raised).
    """
    try:
        if name.endswith(".py"):
            path = os.path.abspath(name)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"no such file: {path}")
            stem = os.path.splitext(os.path.basename(path))[0]
            if stem in sys.modules and getattr(sys.modules[stem], "__file__", None) == path:
                return sys.modules[stem]
            folder = os.path.dirname(path)
            if folder not in sys.path:
                sys.path.insert(0, folder)  # its sibling modules import as they would there
            spec = importlib.util.spec_from_file_location(stem, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[stem] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[stem]
                raise
            return module
        return importlib.import_module(name)
    except Exception as e:  # the user's module: any error it raises is reported in one line
        message = " ".join(f"{type(e).__name__}: {e}".split())
        raise ValueError(
            f"{flag} {name!r} failed: {message}. Put the module's folder on PYTHONPATH or give "
            "the path of its .py file, and check that it imports on its own "
            f"(python -c 'import {os.path.splitext(os.path.basename(name))[0]}')."
        ) from e


def import_all(names: Sequence[str], *, flag: str = FLAG) -> list[str]:
    """Imports each of `names` in order (`import_module_or_file`); returns them canonical (file
    paths absolute), as `record_imports` keeps them."""
    done = []
    for name in names:
        import_module_or_file(name, flag=flag)
        canonical = _canonical(name)
        if canonical not in done:
            done.append(canonical)
    return done


def imports_in_argv(argv: Sequence[str], *, flag: str = FLAG) -> list[str]:
    """The values of every `--import X` / `--import=X` in a command line, in order.

    Example:
      >>> imports_in_argv(["prog", "--import", "a.b", "--import=c.py", "--workdir", "w"])
      ['a.b', 'c.py']
    """
    found = []
    for i, arg in enumerate(argv):
        if arg.startswith(flag + "="):
            found.append(arg[len(flag) + 1 :])
        elif arg == flag and i + 1 < len(argv):
            found.append(argv[i + 1])
    return found


def import_from_argv(argv: Sequence[str], *, flag: str = FLAG) -> list[str]:
    """Imports the command line's `--import` modules before its flags are parsed (a config
    file loaded while parsing may use what they register); returns them canonical."""
    return import_all(imports_in_argv(argv, flag=flag), flag=flag)


def import_from_argv_or_exit(argv: Sequence[str]) -> None:
    """`import_from_argv` for an absl command line's flag parser: a module that fails to import
    prints one `error:` line and exits with status 2, before any flag is parsed."""
    try:
        import_from_argv(argv)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def add_import_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Adds `--import MODULE` (repeatable, into `args.imports`) to an argparse command line."""
    parser.add_argument(
        FLAG, dest="imports", action="append", default=[], metavar="MODULE", help=help_text
    )


def record_imports(workdir: str, names: Sequence[str]) -> list[str]:
    """Adds `names` (canonical) to `<workdir>/imports.json`, keeping the earlier ones first;
    returns the whole list. Nothing is written when there is nothing to record."""
    names = [_canonical(n) for n in names]
    recorded = recorded_imports(workdir)
    merged = recorded + [n for n in names if n not in recorded]
    if merged != recorded:
        os.makedirs(workdir, exist_ok=True)
        path = os.path.join(workdir, IMPORTS_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump(merged, f, indent=1)
        os.replace(path + ".tmp", path)
    return merged


def recorded_imports(workdir: str) -> list[str]:
    """The imports `<workdir>/imports.json` records ([] when there is none).

    Raises:
      ValueError: the file is not a JSON list of strings (naming it and the fix).
    """
    path = os.path.join(workdir, IMPORTS_FILE)
    if not os.path.isfile(path):
        return []
    try:
        with open(path) as f:
            names = json.load(f)
    except json.JSONDecodeError as e:
        names = e
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"{path} should hold a JSON list of module names or .py paths (the run's --import "
            "flags); fix or delete it and pass --import again."
        )
    return names
