"""Prompts through tensorflow-datasets: a builder over a local JSONL file, read without TensorFlow.

`JsonlPromptBuilder` is a `tfds.core.GeneratorBasedBuilder` that converts a GSM8K-format JSONL file
into tfds' array_record format (offline: nothing is downloaded). `builder.as_data_source()` then reads
records back as numpy through `array_record`, without TensorFlow (`as_dataset()` would need TF).
`TfdsSource` wraps that data source as a source of `Example`s, equal to `JsonlSource` over the file.

Each file gets its own builder config, named after the file and a hash of its bytes and keys, so a
changed file is rebuilt and an unchanged one is reused from `data_dir`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator

import numpy as np
import tensorflow_datasets as tfds
from tensorflow_datasets.core.utils import tqdm_utils

from jaxrl_llm.data import jsonl
from jaxrl_llm.data.example import Example
from jaxrl_llm.data.jsonl import check_no_duplicates
from jaxrl_llm.data.split import (
    DEFAULT_HELD_OUT_FRACTION,
    DEFAULT_SELECTION_FRACTION,
    check_side,
    side_rows,
)

__all__ = ["JsonlPromptBuilder", "TfdsSource"]

_SPLIT = "train"


def _config_name(path: str, question_key: str, answer_key: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    digest.update(f"\0{question_key}\0{answer_key}".encode())
    stem = re.sub(r"[^a-z0-9_]+", "_", os.path.splitext(os.path.basename(path))[0].lower())
    return f"{stem.strip('_') or 'prompts'}_{digest.hexdigest()[:12]}"


class JsonlPromptBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """tfds builder of one split, "train", from a GSM8K-format JSONL file.

    Features: `question` (text), `answer` (text, the final answer after "####"), `raw` (text, the
    line's JSON object) and `index` (int64, position among the file's examples). Shuffling is
    disabled, so records keep the file's order.

    Args:
      path: the JSONL file.
      data_dir: where tfds writes the prepared dataset.
      question_key, answer_key: the JSON fields to read (see `jsonl.read_prompt_jsonl`).

    Example:
      >>> builder = JsonlPromptBuilder(path="gsm8k.jsonl", data_dir="/tmp/tfds")
      >>> builder.download_and_prepare(file_format="array_record")
      >>> builder.as_data_source(split="train")[0]["answer"]
      b'18'
    """

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Question, final answer, raw JSON line and index."}

    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls):
        """None: no checksums file to look for (nothing is downloaded).

        tfds 4.9.10 otherwise resolves the path of a builder defined inside a package through the
        `importlib_resources` backport, which it declares only for Python < 3.9.
        """
        return None

    def __init__(
        self,
        *,
        path: str | os.PathLike,
        data_dir: str | os.PathLike,
        question_key: str = "question",
        answer_key: str = "answer",
        **kwargs,
    ):
        self._path = os.fspath(path)
        if not os.path.isfile(self._path):
            raise FileNotFoundError(f"JSONL prompt file not found: {self._path!r}")
        self._question_key, self._answer_key = question_key, answer_key
        config = tfds.core.BuilderConfig(
            name=_config_name(self._path, question_key, answer_key),
            version=self.VERSION,
            description=f"Prompts of {self._path}",
        )
        super().__init__(data_dir=os.fspath(data_dir), config=config, **kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        # DatasetInfo directly: `dataset_info_from_configs` would read tfds metadata files from
        # this module's package directory.
        return tfds.core.DatasetInfo(
            builder=self,
            description="Question / answer prompts read from a local GSM8K-format JSONL file.",
            features=tfds.features.FeaturesDict(
                {
                    "question": tfds.features.Text(),
                    "answer": tfds.features.Text(),
                    "raw": tfds.features.Text(),
                    "index": np.int64,
                }
            ),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # local file: nothing to download
        return {_SPLIT: self._generate_examples()}

    def _generate_examples(self):
        records = jsonl.read_prompt_jsonl(
            self._path, question_key=self._question_key, answer_key=self._answer_key
        )
        for index, record in enumerate(records):
            yield (
                index,
                {
                    "question": record.question,
                    "answer": record.answer,
                    "raw": json.dumps(record.raw, ensure_ascii=False),
                    "index": index,
                },
            )


@contextlib.contextmanager
def _no_progress_bar():
    previous = getattr(tqdm_utils, "_active", True)
    tfds.display_progress_bar(False)
    try:
        yield
    finally:
        tfds.display_progress_bar(previous)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class TfdsSource:
    """A prompt source read through tfds' array_record data source (no TensorFlow).

    Prepares `JsonlPromptBuilder` over `path` in `data_dir` (once; later calls reuse it), then reads
    records by index with `builder.as_data_source()`. Examples equal `JsonlSource(path)`'s and are
    scored the same way.

    Args:
      path: the JSONL file.
      data_dir: tfds data directory.
      question_key, answer_key: JSON fields to read.
      name: the examples' `source`; defaults to the file name without extension.
      split, held_out_fraction, selection_fraction, problem_key: as in `JsonlSource`: one side
        of the hash split, or every line.

    Example:
      >>> source = TfdsSource("gsm8k_test.jsonl", data_dir="/tmp/tfds")
      >>> source[0] == JsonlSource("gsm8k_test.jsonl")[0]
      True
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        data_dir: str | os.PathLike,
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
        self.builder = JsonlPromptBuilder(
            path=self.path, data_dir=data_dir, question_key=question_key, answer_key=answer_key
        )
        with _no_progress_bar():
            self.builder.download_and_prepare(
                file_format="array_record",
                download_config=tfds.download.DownloadConfig(try_download_gcs=False),
            )
        self._data = self.builder.as_data_source(split=_SPLIT)
        self.split = split
        self._rows = list(range(len(self._data)))
        questions = [_text(self._data[i]["question"]) for i in self._rows]
        check_no_duplicates(self.path, questions, [i + 1 for i in self._rows])
        if split is not None:
            side = check_side(split, field="TfdsSource split")

            def key_of(row: int) -> str:
                if problem_key is None:
                    return questions[row]
                return problem_key(json.loads(_text(self._data[row]["raw"])))

            self._rows = side_rows(
                self._rows,
                key_of,
                side=side,
                held_out_fraction=held_out_fraction,
                selection_fraction=selection_fraction,
                describe=self.path,
            )

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: int) -> Example:
        """The example at `index` (negative indices count from the end)."""
        n = len(self._rows)
        if not -n <= index < n:
            raise IndexError(f"index {index} out of range for {self!r} of size {n}")
        index %= n
        row = self._rows[index]
        record = self._data[row]
        if int(record["index"]) != row:
            raise RuntimeError(
                f"{self!r}: record {row} holds example {int(record['index'])}; the prepared "
                f"data in {self.builder.data_dir} is out of order. Delete it to rebuild."
            )
        return Example(
            question=_text(record["question"]),
            answer=_text(record["answer"]),
            source=self.name,
            index=index,
            metadata=json.loads(_text(record["raw"])),
            scorer=None,  # as JsonlSource: scoring.math_answer_score against `answer`
        )

    def __iter__(self) -> Iterator[Example]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        split = "" if self.split is None else f", split={self.split!r}"
        return f"TfdsSource({self.path!r}, name={self.name!r}{split})"
