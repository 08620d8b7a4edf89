"""Python files that define configs or sweeps, loaded by path.

An experiment config is a file with `get_config()` (the ml_collections convention that
`config_flags.DEFINE_config_file` reads); `path:arg` calls `get_config("arg")`, as config_flags
does, so one file can hold several related configs (the stages of a pipeline). A config that
builds on another one beside it loads it with `sibling_config` instead of copying its fields:

    # experiments/configs/ppo_llama8b_pod.py
    def get_config():
        config = config_for("ppo")
        sibling_module(__file__, "grpo_llama8b_pod.py").pod_shapes(config)
        ...

Nothing here validates values (`unknown_config_flag` only checks that `--config.KEY` flags name
fields and `config_file_error` gives a file's own error, for the command line's one line):
`jaxrl_llm.stages.load_config` reads a config with `config_from_file` and validates it for its
stage.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from types import ModuleType

import ml_collections

from jaxrl_llm.config import config_keys, error_line, unknown_key_message

__all__ = [
    "config_file_error",
    "config_from_file",
    "load_module",
    "sibling_config",
    "sibling_module",
    "split_config_arg",
    "unknown_config_flag",
]


def load_module(path: str, *, kind: str = "config") -> ModuleType:
    """Executes the Python file at `path` as a fresh module (not added to `sys.modules`).

    Raises:
      FileNotFoundError: naming the `kind` of file and the path.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{kind.capitalize()} file not found: {path!r}.")
    name = f"_{kind}_{os.path.splitext(os.path.basename(path))[0]}_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def split_config_arg(path: str) -> tuple[str, str | None]:
    """("file.py", "arg") for "file.py:arg", ("file.py", None) for "file.py" (config_flags' rule:
    the argument follows the last colon after the file's name)."""
    head, sep, arg = path.rpartition(":")
    if sep and head.endswith(".py") and arg and os.sep not in arg:
        return head, arg
    return path, None


def config_from_file(path: str) -> ml_collections.ConfigDict:
    """`get_config()` of a config file, or `get_config(arg)` for "file.py:arg"; not validated.

    Raises:
      FileNotFoundError: no such file.
      AttributeError: the file defines no `get_config()`.
    """
    file_path, arg = split_config_arg(path)
    module = load_module(file_path, kind="config")
    get_config = getattr(module, "get_config", None)
    if not callable(get_config):
        raise AttributeError(f"{file_path}: a config file must define `get_config()`.")
    return get_config() if arg is None else get_config(arg)


def sibling_module(anchor: str, file_name: str) -> ModuleType:
    """The module of `file_name` in the directory of `anchor` (a config file's `__file__`)."""
    return load_module(os.path.join(os.path.dirname(os.path.abspath(anchor)), file_name))


def sibling_config(anchor: str, file_name: str, *args) -> ml_collections.ConfigDict:
    """`get_config(*args)` of `file_name` beside `anchor`: a config written once in its own file
    and built upon here, not copied."""
    return sibling_module(anchor, file_name).get_config(*args)


def _config_flags(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """(the `--config` file of `argv` or None, the KEYs of its `--config.KEY` flags)."""
    path, keys = None, []
    for i, arg in enumerate(argv):
        name, _, value = arg.partition("=")
        if name == "--config":
            path = value or (argv[i + 1] if i + 1 < len(argv) else None)
        elif name.startswith("--config."):
            keys.append(name.removeprefix("--config."))
    return path, keys


def config_file_error(argv: Sequence[str]) -> str | None:
    """The one-line message of the ValueError the `--config` file of `argv` raises itself
    (`get_config("bad")` of a file whose argument after ':' picks a stage or a method), which
    absl would print with the file's traceback; None when the file loads or fails otherwise."""
    path, _ = _config_flags(argv)
    if path is None:
        return None
    try:
        config_from_file(path)
    except ValueError as e:
        return error_line(e)
    except Exception:  # noqa: BLE001 -- any other failure is reported by absl's own message
        return None
    return None


def unknown_config_flag(argv: Sequence[str]) -> str | None:
    """The one-line error for the first `--config.KEY` flag of `argv` that names no field of
    the `--config` file (`jaxrl_llm.config.unknown_key_message`), or None if all exist or the
    file does not load (its own error is clearer then)."""
    path, keys = _config_flags(argv)
    if path is None or not keys:
        return None
    try:
        config = config_from_file(path)
    except Exception:  # noqa: BLE001 -- any failure here is reported by absl's own message
        return None
    known = set(config_keys(config))
    for key in keys:
        if key not in known:
            return unknown_key_message(config, key, prefix="--config.")
    return None
