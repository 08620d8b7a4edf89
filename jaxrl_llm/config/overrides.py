"""Dotted keys of a config: setting them (`apply_overrides`), listing them, and one line for a
key that does not exist, naming the closest one (`unknown_key_message`)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import ml_collections


def flat_dict(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a.b": value} of a nested dict such as a saved config.json (lists become tuples, so
    values compare and hash; an empty section has no entry)."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flat_dict(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
    return flat


def config_keys(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """Every dotted key of `config`, sections included: ["algorithm", "train", "train.seed", ...]."""
    keys = []
    for key, value in config.items():
        name = f"{prefix}{key}"
        keys.append(name)
        if isinstance(value, ml_collections.ConfigDict):
            keys.extend(config_keys(value, name + "."))
    return keys


def unknown_key_message(config: ml_collections.ConfigDict, dotted: str, *, prefix: str = "") -> str:
    """One line for a dotted key `config` lacks, with the closest full key if one is near.

    `prefix` is how the user wrote the key's start, e.g. "--config." for a flag:
    `"--config.train.num_stepz is not a config field; did you mean --config.train.num_steps?"`.
    """
    close = difflib.get_close_matches(dotted, config_keys(config), n=1, cutoff=0.6)
    if not close:
        return f"{prefix}{dotted} is not a config field (none is close; check its spelling)."
    return f"{prefix}{dotted} is not a config field; did you mean {prefix}{close[0]}?"


def error_line(error: BaseException) -> str:
    """`error`'s message on one line, without the quotes `str(KeyError(...))` adds."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    return " ".join(str(message).replace("\\n", " ").split()) or type(error).__name__


def apply_overrides(
    config: ml_collections.ConfigDict, overrides: Mapping[str, Any]
) -> ml_collections.ConfigDict:
    """Sets dotted `overrides` ({"rollout.group_size": 4}) on a locked config, in place.

    Raises:
      KeyError: for an unknown key, naming the closest existing key (`unknown_key_message`).
    """
    known = set(config_keys(config))
    for dotted, value in overrides.items():
        if dotted not in known:
            raise KeyError(unknown_key_message(config, dotted))
        *parents, leaf = dotted.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[leaf] = value
    return config
