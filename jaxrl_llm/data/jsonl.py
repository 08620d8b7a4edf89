"""Prompts from a local JSONL file in GSM8K format, scored by numeric / math-verify equality.

GSM8K lines look like `{"question": "...", "answer": "<reasoning>\\n#### 72"}`: the reference answer
is the text after the last "####". Files whose answer field holds the bare answer work too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from jaxrl_llm.data import scoring
from jaxrl_llm.data.example import Example
from jaxrl_llm.data.split import (
    DEFAULT_HELD_OUT_FRACTION,
    DEFAULT_SELECTION_FRACTION,
    check_side,
    duplicate_questions,
    side_rows,
)

__all__ = [
    "JsonlRecord",
    "JsonlSource",
    "as_text",
    "check_no_duplicates",
    "final_answer",
    "json_objects",
    "read_prompt_jsonl",
    "write_jsonl",
]


def final_answer(answer_field: str) -> str:
    """The reference answer of a GSM8K answer field: the text after the last "####".

    Thousands separators of a plain number are dropped ("1,234" -> "1234"); a field without
    "####" is taken whole (stripped).

    Example:
      >>> final_answer("She pays 3 * 4 = <<3*4=12>>12 dollars.\\n#### 1,212")
      '1212'
    """
    text = answer_field.rsplit("####", 1)[-1].strip()
    if scoring.normalize_number(text) is not None and "," in text:
        text = text.replace(",", "")
    return text


class JsonlRecord(NamedTuple):
    """One parsed line of a prompt JSONL file.

    Attributes:
      line_number: 1-based line number in the file.
      question: the question text.
      answer: the final answer (after "####", thousands separators dropped).
      raw: the line's JSON object.
    """

    line_number: int
    question: str
    answer: str
    raw: dict[str, Any]


def as_text(value: Any, *, key: str, where: str) -> str:
    """A field's value as text: a string as is, a number written out (not a bool).

    Raises:
      ValueError: another type (names `where`, e.g. "data.jsonl:3", and the key).

    Example:
      >>> as_text(72, key="answer", where="gsm8k.jsonl:1")
      '72'
    """
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise ValueError(
        f"{where}: key {key!r} must be a string or a number, got {type(value).__name__}."
    )


def json_objects(
    path: str | os.PathLike, *, what: str
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, where, object) for every non-blank line of a JSONL file; `where` is
    "<path>:<line number>", for the caller's own field errors.

    Raises:
      FileNotFoundError: no file at `path` (the message names `what` it should hold).
      ValueError: a line that is not valid JSON or not an object (the message gives the file
        and the line), or a file without any line.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} file {path!r} does not exist.")
    count = 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg} at column {e.colno}).") from e
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}.")
            count += 1
            yield number, where, obj
    if not count:
        raise ValueError(f"{path} holds no {what}.")


def write_jsonl(path: str | os.PathLike, objects: Iterable[dict[str, Any]]) -> int:
    """Writes one JSON object a line (what `json_objects` reads); returns how many. The file
    appears whole or not at all: written beside it, then renamed, so a kill mid-write leaves
    the old file or none, never a half file a later run would read as complete."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    count = 0
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for obj in objects:
                f.write(json.dumps(obj) + "\n")
                count += 1
    except BaseException:  # a bad object: leave no half file behind
        os.remove(path + ".tmp")
        raise
    os.replace(path + ".tmp", path)
    return count


def read_prompt_jsonl(
    path: str | os.PathLike, *, question_key: str = "question", answer_key: str = "answer"
) -> list[JsonlRecord]:
    """Reads and validates every line of a GSM8K-format JSONL file (blank lines are skipped).

    Raises:
      FileNotFoundError: no file at `path`.
      ValueError: a line that is not a JSON object, lacks a key (the message gives the file, the
        line number and the keys found), or a file without any example.

    Example:
      >>> read_prompt_jsonl("gsm8k.jsonl")[0]
      JsonlRecord(line_number=1, question='Tom has ...', answer='18', raw={'question': ..., ...})
    """
    records = []
    for line_number, where, raw in json_objects(path, what="examples"):
        for key in (question_key, answer_key):
            if key not in raw:
                raise ValueError(
                    f"{where}: missing key {key!r}; the line has keys {sorted(raw)}. "
                    "Pass question_key= / answer_key= to read other field names."
                )
        question = as_text(raw[question_key], key=question_key, where=where)
        answer = final_answer(as_text(raw[answer_key], key=answer_key, where=where))
        records.append(JsonlRecord(line_number, question, answer, raw))
    return records


def check_no_duplicates(path: str, questions: Sequence[str], line_numbers: Sequence[int]) -> None:
    """Raises a ValueError naming the first repeated question's lines in `path`, if any.

    A question that appears twice would count twice in an accuracy, and two copies that differ
    only in case or spacing hash to the same side anyway; keep one line of each.
    """
    repeats = duplicate_questions(questions)
    if repeats:
        first, again = repeats[0]
        raise ValueError(
            f"{path}: line {line_numbers[again]} repeats the question of line "
            f"{line_numbers[first]} ({len(repeats)} repeated question(s) in all, compared after "
            "normalising case and spaces); keep one line per question."
        )


class JsonlSource:
    """A prompt source over a local JSONL file in GSM8K format, read once into memory.

    Examples are scored by `scoring.math_answer_score`: math-verify equality, falling back to exact
    decimal equality.

    Args:
      path: the JSONL file.
      question_key: field holding the question.
      answer_key: field holding the answer (GSM8K: reasoning, then "#### <answer>").
      name: the examples' `source`; defaults to the file name without extension.
      split: None keeps every line; "train", "selection" or "test" ("held_out" is "test") keeps
        the lines whose key lies on that side of the hash split (`jaxrl_llm.data.split.side_of`),
        in file order.
      held_out_fraction, selection_fraction: the test and selection sides' shares.
      problem_key: a line's JSON object -> its problem key (`jaxrl_llm.data.problem_keys`);
        None hashes the question text (a file has no canonical form of its own).

    Raises:
      ValueError: a question that repeats an earlier line's (both line numbers and the fix), or
        a side of the split with no question; see also `read_prompt_jsonl`.

    Example:
      >>> source = JsonlSource("gsm8k_test.jsonl")
      >>> ex = source[0]
      >>> ex.answer, ex.score("18"), ex.score("18.0"), ex.score("17")
      ('18', 1.0, 1.0, 0.0)
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        question_key: str = "question",
        answer_key: str = "answer",
        name: str | None = None,
        split: str | None = None,
        held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
        selection_fraction: float = DEFAULT_SELECTION_FRACTION,
        problem_key: Callable[[dict], str] | None = None,
    ):
        self.path = os.fspath(path)
        self.name = name or os.path.splitext(os.path.basename(self.path))[0]
        self.split = split
        records = read_prompt_jsonl(self.path, question_key=question_key, answer_key=answer_key)
        check_no_duplicates(
            self.path, [r.question for r in records], [r.line_number for r in records]
        )
        if split is not None:
            side = check_side(split, field="JsonlSource split")
            records = side_rows(
                records,
                (lambda r: r.question) if problem_key is None else (lambda r: problem_key(r.raw)),
                side=side,
                held_out_fraction=held_out_fraction,
                selection_fraction=selection_fraction,
                describe=self.path,
            )
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> Example:
        """The example at `index` (negative indices count from the end)."""
        n = len(self._records)
        if not -n <= index < n:
            raise IndexError(f"index {index} out of range for {self!r} of size {n}")
        index %= n
        record = self._records[index]
        return Example(
            question=record.question,
            answer=record.answer,
            source=self.name,
            index=index,
            metadata=record.raw,
            scorer=None,  # Example's default: scoring.math_answer_score against `answer`
        )

    def __iter__(self) -> Iterator[Example]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        split = "" if self.split is None else f", split={self.split!r}"
        return f"JsonlSource({self.path!r}, name={self.name!r}{split})"
