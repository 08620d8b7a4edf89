"""Supervised fine-tuning records: a question and the response to imitate, before the chat template.

Three sources give them: a JSONL file of `{"prompt": ..., "response": ...}` lines
(`read_sft_jsonl`), and any prompt source with reference answers (reasoning-gym tasks, the
GSM8K-style JSONL and tfds sources of `jaxrl_llm.data`), whose gold answers become short
responses (`records_from_examples`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from jaxrl_llm.data.example import Example
from jaxrl_llm.data.jsonl import json_objects

__all__ = ["SftRecord", "read_sft_jsonl", "records_from_examples", "DEFAULT_RESPONSE_TEMPLATE"]

# How a gold answer becomes a response: the verifiers read the last number, so a short sentence
# that ends with the answer trains the format the RL stage is scored in.
DEFAULT_RESPONSE_TEMPLATE = "The answer is {answer}."


class SftRecord(NamedTuple):
    """A user message and the assistant response to imitate (plain texts, no template)."""

    prompt: str
    response: str


def read_sft_jsonl(
    path: str, *, prompt_key: str = "prompt", response_key: str = "response"
) -> list[SftRecord]:
    """Every record of a JSONL file (blank lines skipped).

    Raises:
      FileNotFoundError: no such file.
      ValueError: naming the file, line and field of the first bad line (invalid JSON, not an
        object, a missing or non-string field, an empty response), or an empty file.
    """
    records = []
    for _, where, obj in json_objects(path, what="SFT records"):
        texts = []
        for key in (prompt_key, response_key):
            if key not in obj:
                raise ValueError(f"{where}: field {key!r} is missing.")
            if not isinstance(obj[key], str):
                raise ValueError(
                    f"{where}: field {key!r} must be a string, got {type(obj[key]).__name__}."
                )
            texts.append(obj[key])
        if not texts[1].strip():
            raise ValueError(f"{where}: field {response_key!r} is an empty response.")
        records.append(SftRecord(*texts))
    return records


def records_from_examples(
    examples: Iterable[Example], template: str = DEFAULT_RESPONSE_TEMPLATE
) -> list[SftRecord]:
    """Each example's question with its gold answer rendered by `template` ("{answer}" in it).

    Example:
      >>> records_from_examples([Example("2 + 3 =", "5", "hand", 0)])
      [SftRecord(prompt='2 + 3 =', response='The answer is 5.')]
    """
    if "{answer}" not in template:
        raise ValueError(f"records_from_examples: template {template!r} must contain '{{answer}}'.")
    return [SftRecord(e.question, template.format(answer=e.answer)) for e in examples]
