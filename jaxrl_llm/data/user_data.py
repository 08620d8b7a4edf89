"""A user's own prompts as a run's task: `config.task.data`, split like the presets.

With `config.task.data.train` set, every side of the run's task comes from the user's rows
(`presets.task_pool` dispatches here): training, evaluation, validation and the chance prior.
A row becomes an `Example`:

    question  the prompt column: a string, or chat messages [{"role", "content"}, ...] (roles
              system / user / assistant, ending with the user's), kept as `Example.messages`
              and rendered as that conversation; `question` is then its text
    answer    the answer column as text (after the last "####", GSM8K's format); the column is
              in every row or in none, and a run on rows without answers needs
              config.rewards.task_weight=0 (its rewards are the user's own)
    metadata  the whole row: every column reaches the user's reward functions
    source    config.task.name, the label metrics and reports show

Sides. Without `held_out`, each row's side is the hash of its prompt text (or of
`key_column`, when rows that share a key are one problem) as for the presets
(`jaxrl_llm.data.split`): train / selection / test by config.task.held_out_fraction and
selection_fraction. With `held_out`, that file is the test side and the selection side is
carved from `train` by the same hash (its selection_fraction share).

Sizes. The training pool is every train-side row (cycled by `PromptBatcher`; train_size does
not apply). An evaluated side gives eval_size rows drawn with eval_seed, or the whole side, with
one warning line, when it holds fewer. An empty side stops with the file and the share to change.

A prompt that repeats another's (normalised case and spaces, across both files), or a held-out
row whose `key_column` a train row shares, stops the run with both places: it would count twice
in an accuracy, or sit on two sides.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from jaxrl_llm.data.example import Example
from jaxrl_llm.data.jsonl import as_text, final_answer, write_jsonl
from jaxrl_llm.data.prompts import check_messages
from jaxrl_llm.data.split import (
    DEFAULT_HELD_OUT_FRACTION,
    DEFAULT_SELECTION_FRACTION,
    SIDES,
    Sides,
    check_side,
    duplicate_questions,
    empty_side_error,
    normalize_question,
    side_of,
)
from jaxrl_llm.data.user_rows import DataRow, read_rows

__all__ = [
    "UserData",
    "conversation_text",
    "file_examples",
    "load_user_data",
    "user_pool",
    "uses_user_data",
    "write_prompts",
]

_FIELD = "config.task.data"
_LOG = logging.getLogger(__name__)
# load_user_data's cache: validation, training, evaluation and the chance prior read one load.
_LOADED: dict[tuple, UserData] = {}
# (file, side, size) already told that eval_size exceeds the side (one line each per process).
_WARNED: set[tuple] = set()


@dataclasses.dataclass(frozen=True)
class UserData:
    """A user's prompts, read and split.

    Attributes:
      describe: how errors name the data (the train file, and the held-out file if any).
      has_answers: whether the rows carry an answer column (else every answer is "").
      sides: the examples of each side, each indexed by its position on its side.
    """

    describe: str
    has_answers: bool
    sides: Sides[Example]


def uses_user_data(task_section: Any) -> bool:
    """Whether a run's task section names a user's data (`config.task.data.train`).

    Example:
      >>> uses_user_data(config.task)   # False for a preset task
      False
    """
    data = task_section.get("data") if hasattr(task_section, "get") else None
    return bool(data and data.get("train"))


def conversation_text(messages: Iterable[Mapping[str, str]]) -> str:
    """The text of a chat prompt: one user message's content alone (so it equals the same
    prompt given as a string), else a "role: content" paragraph per message.

    Example:
      >>> conversation_text([{"role": "system", "content": "Be brief."},
      ...                    {"role": "user", "content": "2 + 3 ="}])
      'system: Be brief.\\n\\nuser: 2 + 3 ='
    """
    messages = list(messages)
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)


@dataclasses.dataclass(frozen=True)
class _Prompt:
    row: DataRow
    question: str
    answer: str | None
    messages: tuple[dict[str, str], ...] | None
    key: str


def _prompt(row: DataRow, data: Mapping[str, Any]) -> _Prompt:
    values, column = row.values, data["prompt_column"]
    if column not in values:
        raise ValueError(
            f"{row.where}: no prompt column {column!r} (the row has {sorted(values)}); add it, "
            f"or name the prompt column with {_FIELD}.prompt_column."
        )
    messages = None
    if isinstance(values[column], str):
        question = values[column]
    else:
        messages = check_messages(values[column], where=row.where)
        question = conversation_text(messages)
    answer_column, key_column = data["answer_column"], data.get("key_column", "")
    answer = values.get(answer_column)
    if answer is not None:
        answer = final_answer(as_text(answer, key=answer_column, where=row.where))
    key = question
    if key_column:
        if values.get(key_column) is None:
            raise ValueError(
                f"{row.where}: no key column {key_column!r} ({_FIELD}.key_column); give every "
                "row a key, or set it to '' to split by prompt text."
            )
        key = as_text(values[key_column], key=key_column, where=row.where)
    return _Prompt(row, question, answer, messages, key)


def _check_answers(prompts: list[_Prompt], column: str) -> bool:
    """Whether the rows have answers; raises when only some have."""
    missing = [p for p in prompts if p.answer is None]
    if missing and len(missing) < len(prompts):
        having = next(p for p in prompts if p.answer is not None)
        raise ValueError(
            f"{missing[0].row.where}: no answer column {column!r}, which {having.row.where} "
            f"has; give every row an answer, or none (a run without answers needs "
            f"config.rewards.task_weight=0), or name the column with {_FIELD}.answer_column."
        )
    return not missing


def _check_repeats(prompts: list[_Prompt]) -> None:
    repeats = duplicate_questions([p.question for p in prompts])
    if repeats:
        first, again = repeats[0]
        raise ValueError(
            f"{prompts[again].row.where} repeats the prompt of {prompts[first].row.where} "
            f"({len(repeats)} repeated prompt(s) in all, compared after normalising case and "
            "spaces); keep one row per prompt."
        )


def _check_held_out_keys(train: list[_Prompt], held_out: list[_Prompt], column: str) -> None:
    """A held-out problem (by `key_column`) must not be trained on."""
    trained = {normalize_question(p.key): p for p in train}
    for prompt in held_out:
        seen = trained.get(normalize_question(prompt.key))
        if seen is not None:
            raise ValueError(
                f"{prompt.row.where} has the {column!r} {prompt.key!r} of {seen.row.where}: "
                "a held-out problem would be trained on; drop one of the rows."
            )


def _examples(prompts: list[_Prompt], name: str) -> list[Example]:
    return [
        Example(
            question=p.question,
            answer=p.answer or "",
            source=name,
            index=i,
            metadata=p.row.values,
            scorer=None,  # Example's default: numeric / math-verify equality with the answer
            messages=p.messages,
        )
        for i, p in enumerate(prompts)
    ]


def file_examples(spec: str, task_section: Any, *, name: str) -> list[Example]:
    """Every row of one data file as `Example`s named `name`, read with the columns of a run's
    `config.task.data` (its defaults where the section has none): what `evaluate --jsonl FILE`
    scores, with no split (the whole file is one held-out set).

    Raises:
      ValueError / FileNotFoundError: as `load_user_data` (a row without the prompt column, an
        empty or missing file, repeated prompts), naming the file.
    """
    section = task_section.get("data") if hasattr(task_section, "get") else None
    data = {"prompt_column": "prompt", "answer_column": "answer", "format": "auto"}
    data.update({k: section[k] for k in data if section is not None and k in section})
    prompts = _read(spec, data, spec)
    _check_answers(prompts, data["answer_column"])
    _check_repeats(prompts)
    return _examples(prompts, name)


def _stamp(spec: str) -> tuple:
    """`spec` with its file's modification time and size: a changed file is read again."""
    path = spec.removeprefix("tfds:")
    if not os.path.exists(path):  # "DIR:SPLIT"
        path = path.rsplit(":", 1)[0]
    try:
        stat = os.stat(path)
    except OSError:  # read_rows names the missing file
        return (spec,)
    return (spec, stat.st_mtime_ns, stat.st_size)


def load_user_data(task_section: Any) -> UserData:
    """Reads and splits `task_section.data` (cached per process while the files are unchanged).

    Args:
      task_section: a run config's `task` section with `data.train` set (name, data,
        held_out_fraction, selection_fraction).

    Raises:
      FileNotFoundError, ValueError: one line naming the file (and line) and the fix: a
        missing or unreadable file, an empty one, a row without the prompt column, a bad chat
        message, answers in some rows only, a repeated prompt.

    Example:
      >>> data = load_user_data(config.task)   # config.task.data.train="prompts.jsonl"
      >>> len(data.sides.train), data.sides.test[0].question
    """
    data = task_section["data"]
    fractions = (
        task_section.get("held_out_fraction", DEFAULT_HELD_OUT_FRACTION),
        task_section.get("selection_fraction", DEFAULT_SELECTION_FRACTION),
    )
    columns = (data["prompt_column"], data["answer_column"], data.get("key_column", ""))
    held_out = data.get("held_out", "")
    key = (
        _stamp(data["train"]),
        _stamp(held_out) if held_out else None,
        columns,
        data.get("format", "auto"),
        task_section["name"],
        fractions,
    )
    if key not in _LOADED:
        _LOADED[key] = _load(data, task_section["name"], fractions)
    return _LOADED[key]


def _read(spec: str, data: Mapping[str, Any], field: str) -> list[_Prompt]:
    rows = read_rows(
        spec,
        format=data.get("format", "auto"),
        field=field,
        prompt_column=data["prompt_column"],
        answer_column=data["answer_column"],
    )
    return [_prompt(row, data) for row in rows]


def _load(data: Mapping[str, Any], name: str, fractions: tuple[float, float]) -> UserData:
    train = _read(data["train"], data, f"{_FIELD}.train")
    held_out = _read(data["held_out"], data, f"{_FIELD}.held_out") if data.get("held_out") else []
    has_answers = _check_answers(train + held_out, data["answer_column"])
    _check_repeats(train + held_out)
    if held_out and data.get("key_column"):
        _check_held_out_keys(train, held_out, data["key_column"])
    test_share, selection_share = fractions
    sides: dict[str, list[_Prompt]] = {side: [] for side in SIDES}
    for prompt in train:
        side = side_of(prompt.key, held_out_fraction=test_share, selection_fraction=selection_share)
        if held_out and side == "test":  # the held-out file is the test side
            side = "train"
        sides[side].append(prompt)
    if held_out:
        sides["test"] = held_out
    describe = data["train"] + (f" (held out: {data['held_out']})" if held_out else "")
    return UserData(describe, has_answers, Sides(**{s: _examples(sides[s], name) for s in SIDES}))


def user_pool(
    task_section: Any,
    *,
    side: str,
    seed: int | None = None,
    size: int | None = None,
    eval_seed: int | None = None,
) -> list[Example]:
    """One side of a run's task from the user's data (what `presets.task_pool` returns then).

    Args:
      task_section: a run config's `task` section with `data.train` set.
      side: "train" (every train-side row; `size` given: that many drawn with `seed`),
        "selection" or "test" ("held_out" is "test"): `eval_size` (or `size`) rows drawn with
        `eval_seed` (else the section's), or the whole side when it holds fewer.
      seed, size, eval_seed: as in `presets.task_pool`.

    Returns:
      The examples in file order, indexed by position in the returned list.

    Raises:
      ValueError: the side is empty (names the file and the share to change); see also
        `load_user_data`.

    Example:
      >>> test = user_pool(config.task, side="test")   # eval_size rows of the test side
    """
    side = check_side(side, field="task_pool side")
    data = load_user_data(task_section)
    examples = getattr(data.sides, side)
    if not examples:
        raise empty_side_error(
            data.describe,
            sum(len(s) for s in data.sides),
            side=side,
            held_out_fraction=task_section.get("held_out_fraction", DEFAULT_HELD_OUT_FRACTION),
            selection_fraction=task_section.get("selection_fraction", DEFAULT_SELECTION_FRACTION),
        )
    if side == "train":
        wanted, draw_seed = size, seed
    else:
        wanted = task_section["eval_size"] if size is None else size
        draw_seed = task_section["eval_seed"] if eval_seed is None else eval_seed
        if wanted > len(examples) and (data.describe, side, wanted) not in _WARNED:
            _WARNED.add((data.describe, side, wanted))
            _LOG.warning(
                "config.task.eval_size=%d is more than the %d prompts on the %s side of %s: "
                "evaluating all %d.",
                wanted, len(examples), side, data.describe, len(examples),
            )  # fmt: skip
    if wanted is None or wanted >= len(examples):
        return list(examples)
    chosen = np.sort(np.random.default_rng(draw_seed).choice(len(examples), wanted, replace=False))
    return [dataclasses.replace(examples[i], index=n) for n, i in enumerate(chosen)]


def _plain(value: Any, where: str) -> Any:
    """`value` as JSON can hold it (numpy scalars and arrays made Python values)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v, where) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, where) for v in value]
    raise TypeError(
        f"write_prompts: {where} holds a {type(value).__name__}, which JSON cannot hold; "
        "make it a string, number, list or dict."
    )


def write_prompts(
    rows: Iterable[Mapping[str, Any]], path: str | os.PathLike, *, prompt_column: str = "prompt"
) -> str:
    """Writes prompt rows as JSONL that `config.task.data.train` reads: Python data runs
    exactly as the same file given on the command line.

    Args:
      rows: dicts (a list, a generator, a `datasets.Dataset`, or a pandas DataFrame's rows),
        each with `prompt_column` (a string or chat messages) and any other columns.
      path: the JSONL file to write (its directory is made; written whole or not at all).
      prompt_column: the column every row must have.

    Returns:
      The absolute path written, for `config.task.data.train`.

    Raises:
      ValueError: a row that is not a dict or lacks `prompt_column` (its 0-based position).
      TypeError: a value JSON cannot hold (its row and column).

    Example:
      >>> config.task.data.train = write_prompts(
      ...     [{"prompt": "2 + 3 =", "answer": 5, "level": 1}], "/tmp/run/prompts.jsonl")
    """
    if hasattr(rows, "columns") and hasattr(rows, "to_dict"):  # a pandas DataFrame
        rows = rows.to_dict("records")

    def checked():
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping) or prompt_column not in row:
                got = sorted(row) if isinstance(row, Mapping) else type(row).__name__
                raise ValueError(
                    f"write_prompts: row {i} has no {prompt_column!r} column (got {got}); give "
                    "every row its prompt, or pass prompt_column=."
                )
            yield {str(k): _plain(v, f"row {i} column {k!r}") for k, v in row.items()}

    path = os.path.abspath(os.fspath(path))  # a run's config.json records it for evaluate
    write_jsonl(path, checked())
    return path
