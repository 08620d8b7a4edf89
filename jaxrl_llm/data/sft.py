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

__all__ = [
    "DEFAULT_RESPONSE_TEMPLATE",
    "STEPS_RESPONSE_TEMPLATE",
    "SftRecord",
    "read_sft_jsonl",
    "records_from_examples",
    "worked_steps",
]

# How a gold answer becomes a response: the verifiers read the last number, so a short sentence
# that ends with the answer trains the format the RL stage is scored in.
DEFAULT_RESPONSE_TEMPLATE = "The answer is {answer}."
# A worked solution, one operation a line (`worked_steps`), then the answer: the format of
# process rewards' steps (the "chain_sum_steps" preset).
STEPS_RESPONSE_TEMPLATE = "{steps}\nThe answer is {answer}."


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
    steps = "{steps}" in template
    return [
        SftRecord(
            e.question,
            template.format(answer=e.answer, steps=worked_steps(e) if steps else ""),
        )
        for e in examples
    ]


def worked_steps(example: Example) -> str:
    """A left-to-right + / - expression worked one operation a line (a template's "{steps}").

    Reads reasoning-gym chain_sum's `metadata["metadata"]["expression"]`.

    Raises:
      ValueError: the example has no such expression (other tasks, files), naming the fix.

    Example:
      >>> worked_steps(task_source("chain_sum_steps", seed=0, size=1)[0])   # 0 - 4 - 8 - 7 + 6
      '0 - 4 = -4\n-4 - 8 = -12\n-12 - 7 = -19\n-19 + 6 = -13'
    """
    meta = example.metadata.get("metadata", {}) if isinstance(example.metadata, dict) else {}
    parts = str(meta.get("expression", "")).split()
    ok = len(parts) >= 3 and len(parts) % 2 == 1 and all(op in "+-" for op in parts[1::2])
    try:
        numbers = [int(x) for x in parts[::2]] if ok else []
    except ValueError:
        numbers = []
    if not numbers:
        raise ValueError(
            f"a '{{steps}}' response template needs left-to-right + / - expressions "
            f"(reasoning-gym chain_sum's metadata 'expression'); {example.source!r} example "
            f"{example.index} has none: use config.task.name='chain_sum_steps' (or chain_sum), "
            f"or a template without '{{steps}}'."
        )
    lines, total = [], numbers[0]
    for op, number in zip(parts[1::2], numbers[1:], strict=True):
        after = total + number if op == "+" else total - number
        lines.append(f"{total} {op} {number} = {after}")
        total = after
    return "\n".join(lines)
