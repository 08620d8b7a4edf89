"""Rows of a user's prompt file, whatever its format, each with where it came from.

`read_rows(spec)` reads every row of one data file as a plain dict, offline:

    .jsonl, .json     one JSON object a line (a .json file starting with "[" is one array of
                      objects), read line by line so an error names the line
    .parquet          pyarrow (what the `datasets` library itself reads parquet with): no
                      cache copy, no download
    .arrow            `datasets.Dataset.from_file` (memory-mapped; the files `save_to_disk`
                      writes)
    a directory       `datasets.load_from_disk` (a saved `Dataset`, or one split of a saved
                      `DatasetDict`: "DIR:SPLIT", or DIR alone when it holds one split)
    tfds:<file.jsonl> the file through the tfds builder (`jaxrl_llm.data.TfdsSource`), prepared
                      in a "tfds" directory beside it

Nothing here downloads: every loader reads local files only.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from jaxrl_llm.data.jsonl import json_objects

__all__ = ["DATA_FORMATS", "DataRow", "data_format", "read_rows"]

# What `config.task.data.format` may say; "auto" picks one from the path.
DATA_FORMATS = ("auto", "jsonl", "json", "parquet", "arrow", "dataset", "tfds")
_EXTENSIONS = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet", ".arrow": "arrow"}
_ACCEPTED = (
    "a .jsonl, .json, .parquet or .arrow file, a directory written by datasets' save_to_disk "
    "(DIR:SPLIT for one split of a DatasetDict), or tfds:<file.jsonl>"
)


class DataRow(NamedTuple):
    """One row of a data file.

    Attributes:
      number: its 1-based line number (JSONL) or row number (other formats).
      where: how errors name it: "path:line" (JSONL) or "path row N".
      values: the row's columns.
    """

    number: int
    where: str
    values: dict[str, Any]


def data_format(spec: str, format: str = "auto", *, field: str = "config.task.data") -> str:
    """The format of `spec`: `format` itself unless "auto", else read from the path.

    Raises:
      ValueError: an unknown `format`, or a path whose format "auto" cannot tell.

    Example:
      >>> data_format("prompts.parquet"), data_format("tfds:gsm8k.jsonl")
      ('parquet', 'tfds')
    """
    if format not in DATA_FORMATS:
        raise ValueError(f"{field}.format={format!r} must be one of {DATA_FORMATS}.")
    if format != "auto":
        return format
    if spec.startswith("tfds:"):
        return "tfds"
    if os.path.isdir(spec) or os.path.isdir(_dataset_dir(spec)[0]):
        return "dataset"
    extension = os.path.splitext(spec)[1].lower()
    if extension not in _EXTENSIONS:
        raise ValueError(
            f"{field}: cannot tell the format of {spec!r} from its name; give {_ACCEPTED}, "
            f"or set {field}.format to one of {DATA_FORMATS[1:]}."
        )
    return _EXTENSIONS[extension]


def _dataset_dir(spec: str) -> tuple[str, str | None]:
    """(directory, split) of "DIR" or "DIR:SPLIT"."""
    if os.path.isdir(spec) or ":" not in spec:
        return spec, None
    directory, split = spec.rsplit(":", 1)
    return directory, split


def read_rows(
    spec: str,
    *,
    format: str = "auto",
    field: str = "config.task.data.train",
    prompt_column: str = "prompt",
    answer_column: str = "answer",
) -> list[DataRow]:
    """Every row of one data file (see the module docstring for the formats).

    Args:
      spec: the path (or "DIR:SPLIT", "tfds:<file.jsonl>").
      format: one of `DATA_FORMATS`.
      field: the config field that named `spec`, for errors.
      prompt_column, answer_column: the columns the tfds builder reads (its other formats keep
        every column).

    Returns:
      The rows in file order.

    Raises:
      FileNotFoundError: nothing at `spec` (names `field` and what it may name).
      ValueError: a file that cannot be read in its format, or holds no row (one line naming
        the file and the fix).

    Example:
      >>> read_rows("prompts.jsonl")[0]
      DataRow(number=1, where='prompts.jsonl:1', values={'prompt': '2 + 3 =', 'answer': '5'})
    """
    kind = data_format(spec, format, field=field.rsplit(".", 1)[0])
    path = spec.removeprefix("tfds:") if kind == "tfds" else spec
    path = _dataset_dir(path)[0] if kind == "dataset" else path
    if not os.path.exists(path):
        raise FileNotFoundError(f"{field}={spec!r}: no such file or directory; give {_ACCEPTED}.")
    if kind in ("jsonl", "json") and not _is_json_array(path):
        what = f"prompt rows ({field}); write one JSON object a line"
        return [DataRow(n, where, obj) for n, where, obj in json_objects(path, what=what)]
    if kind == "json":
        values = _json_array(path, field=field)
    elif kind == "tfds":
        values = _tfds_rows(path, prompt_column=prompt_column, answer_column=answer_column)
    else:
        values = _table_rows(spec, kind, field=field)
    if not values:
        raise ValueError(f"{field}={spec!r} holds no rows; add prompts to it.")
    return [DataRow(i + 1, f"{spec} row {i + 1}", row) for i, row in enumerate(values)]


def _is_json_array(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        return f.read(4096).lstrip().startswith("[")


def _json_array(path: str, *, field: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        try:
            values = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{field}={path!r}: not valid JSON ({e.msg} at line {e.lineno}); write one "
                "object a line (JSONL), or one array of objects."
            ) from e
    for i, row in enumerate(values):
        if not isinstance(row, dict):
            raise ValueError(
                f"{path} row {i + 1}: expected a JSON object, got {type(row).__name__}."
            )
    return values


def _table_rows(spec: str, kind: str, *, field: str) -> list[dict[str, Any]]:
    """The rows of a parquet file, an arrow file or a saved `datasets` directory."""
    try:
        if kind == "parquet":
            import pyarrow.parquet

            return pyarrow.parquet.read_table(spec).to_pylist()
        import datasets

        if kind == "arrow":
            return datasets.Dataset.from_file(spec).to_list()
        directory, split = _dataset_dir(spec)
        loaded = datasets.load_from_disk(directory)
    except Exception as e:  # pyarrow's and datasets' own errors, of many types
        raise ValueError(
            f"{field}={spec!r}: not a readable {kind} file ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); check the file, or set "
            f"{field.rsplit('.', 1)[0]}.format."
        ) from e
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in loaded:
            raise ValueError(
                f"{field}={spec!r} is a DatasetDict with splits {splits}; name one as "
                f"'{directory}:{splits[0]}'."
            )
        loaded = loaded[split]
    elif split is not None:
        raise ValueError(f"{field}={spec!r}: {directory!r} holds one Dataset; drop ':{split}'.")
    return loaded.to_list()


def _tfds_rows(path: str, *, prompt_column: str, answer_column: str) -> list[dict[str, Any]]:
    """Each line's object, read back through tfds' array_record data source."""
    from jaxrl_llm.data.tfds_source import TfdsSource

    source = TfdsSource(
        path,
        data_dir=os.path.join(os.path.dirname(os.path.abspath(path)), "tfds"),
        question_key=prompt_column,
        answer_key=answer_column,
    )
    return [example.metadata for example in source]
