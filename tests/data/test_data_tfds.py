"""The tfds builder over a local JSONL file: built offline in array_record, read back without TF."""

import json
import os
import socket
import sys

import pytest

from jaxrl_llm.data import JsonlPromptBuilder, JsonlSource, TfdsSource

ROWS = [
    {"question": "Tom has 3 bags of 6 apples. How many?", "answer": "3 * 6 = 18\n#### 18"},
    {"question": "Revenue of 1,000 pens at $2?", "answer": "#### 2,000"},
    {"question": "Café: 1.5 - 5?", "answer": "#### -3.5", "extra": [1, {"k": None}]},
]


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def write_rows(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def test_tfds_source_builds_offline_and_equals_jsonl(tmp_path, no_network):
    path = write_rows(tmp_path / "gsm8k_tiny.jsonl", ROWS)
    data_dir = tmp_path / "tfds"
    source = TfdsSource(path, data_dir=data_dir)
    reference = JsonlSource(path)
    assert len(source) == len(reference) == 3
    assert list(source) == list(reference)  # question, answer, source, index and raw metadata
    assert source[2].metadata == ROWS[2]
    assert [e.answer for e in source] == ["18", "2000", "-3.5"]
    assert (source[1].score("2,000"), source[1].score("200")) == (1.0, 0.0)
    assert source[-1] == reference[2]
    with pytest.raises(IndexError):
        source[3]
    # The data really is tfds' array_record output, read without TensorFlow.
    version_dir = source.builder.data_path
    assert list(version_dir.glob("*.array_record-00000-of-00001"))
    assert "tensorflow" not in sys.modules


def test_prepared_data_is_reused_and_a_changed_file_rebuilt(tmp_path, no_network):
    path = write_rows(tmp_path / "p.jsonl", ROWS[:2])
    data_dir = tmp_path / "tfds"
    first = TfdsSource(path, data_dir=data_dir)
    prepared = first.builder.data_path
    (records_file,) = prepared.glob("*.array_record-*")
    stamp = os.stat(records_file).st_mtime_ns
    second = TfdsSource(path, data_dir=data_dir)
    assert second.builder.data_path == prepared
    assert os.stat(records_file).st_mtime_ns == stamp  # not written again
    write_rows(path, ROWS)
    third = TfdsSource(path, data_dir=data_dir)
    assert third.builder.data_path != prepared
    assert len(third) == 3 and list(third) == list(JsonlSource(path))


def test_builder_as_data_source_numpy_records(tmp_path, no_network):
    path = write_rows(tmp_path / "raw.jsonl", ROWS)
    builder = JsonlPromptBuilder(path=path, data_dir=tmp_path / "tfds")
    builder.download_and_prepare(file_format="array_record")
    records = builder.as_data_source(split="train")
    assert len(records) == 3
    assert records[1]["answer"] == b"2000"
    assert int(records[2]["index"]) == 2
    assert json.loads(records[2]["raw"]) == ROWS[2]


def test_builder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        TfdsSource(tmp_path / "missing.jsonl", data_dir=tmp_path / "tfds")
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        TfdsSource(path, data_dir=tmp_path / "tfds")
