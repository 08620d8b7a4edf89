"""Comparison-pair files: round trip, and errors that name the line and the field."""

import json

import pytest

from jaxrl_llm.data.pairs import Pair, read_pairs_jsonl, write_pairs_jsonl


def _write(path, *lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_round_trip_keeps_margin_and_metadata(tmp_path):
    pairs = [
        Pair("Q1", "right", "wrong", margin=1.5, meta={"task": "chain_sum"}),
        Pair("Q2", "a", "b"),
    ]
    path = str(tmp_path / "pairs.jsonl")
    assert write_pairs_jsonl(path, pairs) == 2
    got = read_pairs_jsonl(path)
    assert got[0] == pairs[0]
    assert got[1].margin == 0.0 and got[1].meta == {}


@pytest.mark.parametrize(
    "line, message",
    [
        (json.dumps({"prompt": "q", "chosen": "a"}), r"\.jsonl:2: field 'rejected' is missing"),
        (json.dumps({"prompt": "q", "chosen": "a", "rejected": "  "}), "'rejected' is an empty"),
        (json.dumps({"prompt": "q", "chosen": 3, "rejected": "b"}), "'chosen' must be a string"),
        (json.dumps({"prompt": "q", "chosen": "a", "rejected": "b", "margin": "1"}), "'margin'"),
        (json.dumps({"prompt": "q", "chosen": "a", "rejected": "b", "margin": -1}), ">= 0"),
        (json.dumps(["q", "a", "b"]), "expected a JSON object, got list"),
        ('{"prompt": "q", "chosen": ', r"\.jsonl:2: not valid JSON"),
    ],
)
def test_a_bad_line_is_named(tmp_path, line, message):
    good = json.dumps({"prompt": "q", "chosen": "a", "rejected": "b"})
    path = _write(tmp_path / "pairs.jsonl", good, line)
    with pytest.raises(ValueError, match=message) as error:
        read_pairs_jsonl(path)
    assert f"{path}:2:" in str(error.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_pairs_jsonl(str(tmp_path / "none.jsonl"))
    with pytest.raises(ValueError, match="holds no pairs"):
        read_pairs_jsonl(_write(tmp_path / "empty.jsonl", ""))
