"""Comparison pairs for reward models, one JSON object per line:

    {"prompt": "...", "chosen": "...", "rejected": "...", "margin": 1.0}

`prompt` is the chat-rendered prompt text, `chosen` / `rejected` two completions of it (the
preferred one first); `margin` (optional, >= 0) is the Bradley-Terry margin. Other keys are kept
as metadata (e.g. the task and the verifier's scores of both completions). Any file in this
format can train the outcome reward model, whoever made it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple

from jaxrl_llm.data.jsonl import json_objects, write_jsonl

__all__ = ["Pair", "read_pairs_jsonl", "write_pairs_jsonl"]

_TEXT_FIELDS = ("prompt", "chosen", "rejected")


class Pair(NamedTuple):
    """One comparison.

    Attributes:
      prompt, chosen, rejected: texts; the chosen completion is preferred.
      margin: the Bradley-Terry margin (0 when the line has none).
      meta: the line's other keys (None: none).
    """

    prompt: str
    chosen: str
    rejected: str
    margin: float = 0.0
    meta: dict[str, Any] | None = None


def _pair_of(obj: dict[str, Any], where: str) -> Pair:
    texts = []
    for field in _TEXT_FIELDS:
        if field not in obj:
            raise ValueError(
                f"{where}: field {field!r} is missing (a pair needs {', '.join(_TEXT_FIELDS)})."
            )
        value = obj[field]
        if not isinstance(value, str):
            raise ValueError(
                f"{where}: field {field!r} must be a string, got {type(value).__name__}."
            )
        if field != "prompt" and not value.strip():
            raise ValueError(f"{where}: field {field!r} is an empty response.")
        texts.append(value)
    margin = obj.get("margin", 0.0)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not math.isfinite(margin):
        raise ValueError(f"{where}: field 'margin' must be a finite number, got {margin!r}.")
    if margin < 0:
        raise ValueError(f"{where}: field 'margin' must be >= 0, got {margin}.")
    meta = {k: v for k, v in obj.items() if k not in (*_TEXT_FIELDS, "margin")}
    return Pair(*texts, margin=float(margin), meta=meta)


def read_pairs_jsonl(path: str) -> list[Pair]:
    """Every pair of a JSONL file (blank lines skipped).

    Raises:
      FileNotFoundError: no such file.
      ValueError: naming the file, the line and the field of the first bad line (invalid JSON, a
        missing field, a non-string text, an empty response, a bad margin), or an empty file.
    """
    return [_pair_of(obj, where) for _, where, obj in json_objects(path, what="pairs")]


def write_pairs_jsonl(path: str, pairs: Iterable[Pair]) -> int:
    """Writes `pairs` in the format `read_pairs_jsonl` reads, whole or not at all
    (`jsonl.write_jsonl`); returns how many."""

    def line(pair: Pair) -> dict[str, Any]:
        obj = {"prompt": pair.prompt, "chosen": pair.chosen, "rejected": pair.rejected}
        if pair.margin:
            obj["margin"] = pair.margin
        return {**obj, **(pair.meta or {})}

    return write_jsonl(path, (line(pair) for pair in pairs))
