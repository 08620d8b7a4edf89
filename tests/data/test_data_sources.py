"""Prompt sources: reasoning-gym and GSM8K-format JSONL, their examples, scorers and errors."""

import dataclasses
import json

import pytest

from jaxrl_llm.data import (
    Example,
    JsonlSource,
    ReasoningGymSource,
    final_answer,
    math_answer_score,
    math_equal,
    normalize_number,
    read_prompt_jsonl,
    reasoning_gym_tasks,
)

# Three GSM8K-style lines, hand written: answers 18, 2,000 (thousands separator) and -3.5.
GSM8K_LINES = [
    {
        "question": "Tom has 3 bags of 6 apples. How many apples does he have?",
        "answer": "3 * 6 = <<3*6=18>>18 apples.\n#### 18",
    },
    {
        "question": "A shop sells 1,000 pens at $2 each. What is the revenue?",
        "answer": "1000 * 2 = <<1000*2=2000>>2000\n#### 2,000",
    },
    {"question": "Café: what is 1.5 - 5?", "answer": "#### -3.5", "id": "x7"},
]


def write_jsonl(path, rows, *, blank_line_after=None):
    with open(path, "w", encoding="utf-8") as f:
        for i, row in enumerate(rows):
            f.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
            if i == blank_line_after:
                f.write("\n")
    return path


# --- reasoning-gym -----------------------------------------------------------------------------
def test_chain_sum_examples_are_deterministic_and_exact():
    source = ReasoningGymSource("chain_sum", seed=42, size=10, max_terms=2, max_digits=2)
    assert len(source) == 10
    # Hand-checked values of reasoning-gym 0.1.25 with this seed and config.
    first = source[0]
    assert first.question == "State the final answer to the following arithmetic problem: 4 + 3 ="
    assert (first.answer, first.source, first.index) == ("7", "chain_sum", 0)
    assert first.metadata["metadata"]["expression"] == "4 + 3"
    assert [source[i].answer for i in range(1, 4)] == ["71", "8", "114"]
    again = ReasoningGymSource("chain_sum", seed=42, size=10, max_terms=2, max_digits=2)
    assert list(again) == list(source)
    other_seed = ReasoningGymSource("chain_sum", seed=43, size=10, max_terms=2, max_digits=2)
    assert [e.question for e in other_seed] != [e.question for e in source]


def test_reasoning_gym_scorer_is_the_tasks_own():
    ex = ReasoningGymSource("chain_sum", seed=42, size=10, max_terms=2, max_digits=2)[1]  # 99 - 28
    assert ex.answer == "71"
    assert ex.score("71") == 1.0
    assert ex.score("70") == 0.0
    assert ex.score("+071.00") == 1.0  # chain_sum's decimal scorer tolerates sign, zeros, decimals
    assert ex.score(None) == 0.0


def test_reasoning_gym_indexing():
    source = ReasoningGymSource("basic_arithmetic", seed=0, size=3)
    assert source[-1] == source[2]
    assert source[-1].index == 2
    with pytest.raises(IndexError, match="out of range"):
        source[3]
    assert len(list(source)) == 3
    assert "chain_sum" in reasoning_gym_tasks() and len(reasoning_gym_tasks()) == 106


def test_unknown_task_lists_close_names():
    with pytest.raises(ValueError, match="Unknown reasoning-gym task 'chain_sums'") as info:
        ReasoningGymSource("chain_sums", seed=0, size=5)
    assert "'chain_sum'" in str(info.value)


def test_unknown_task_kwarg_is_named_with_close_matches():
    with pytest.raises(ValueError, match="no config field 'max_term'") as info:
        ReasoningGymSource("chain_sum", seed=0, size=5, max_term=3)
    assert "'max_terms'" in str(info.value) and "min_digits" in str(info.value)


def test_rejected_config_names_task_and_reason():
    with pytest.raises(ValueError, match="chain_sum.*min_terms must be positive"):
        ReasoningGymSource("chain_sum", seed=0, size=5, min_terms=0)
    with pytest.raises(ValueError, match="size=0"):
        ReasoningGymSource("chain_sum", seed=0, size=0)


# --- Example and scoring -----------------------------------------------------------------------
def test_example_default_scorer_is_numeric_equality():
    ex = Example(question="2 + 3 =", answer="5", source="hand", index=0)
    assert (ex.score("5"), ex.score("5.0"), ex.score("6"), ex.score("")) == (1.0, 1.0, 0.0, 0.0)


def test_example_custom_scorer_is_clipped_and_not_compared():
    ex = Example("q", "a", "s", 0, scorer=lambda c, e: 3.0 if c == e.answer else -1.0)
    assert (ex.score("a"), ex.score("b")) == (1.0, 0.0)
    assert ex == Example("q", "a", "s", 0)  # the scorer is not part of equality
    with pytest.raises(dataclasses.FrozenInstanceError):
        ex.answer = "b"


def test_normalize_number():
    assert str(normalize_number("$1,234.50.")) == "1234.50"
    assert str(normalize_number(" \u22124 ")) == "-4"
    assert str(normalize_number("25%")) == "25"
    assert normalize_number("4 apples") is None
    assert normalize_number("12,34") is None  # not a thousands separator


def test_math_equal_values():
    assert math_equal("1,234", "1234")
    assert math_equal("18.00", "18")
    assert math_equal("0.5", "\\frac{1}{2}")
    assert math_equal("\\frac{6}{4}", "1.5")
    assert not math_equal("-4", "4")
    assert not math_equal("", "4")
    assert not math_equal("17", "18")
    assert math_answer_score("2000", "2,000") == 1.0


# --- JSONL -------------------------------------------------------------------------------------
def test_final_answer():
    assert final_answer(GSM8K_LINES[0]["answer"]) == "18"
    assert final_answer("x #### 1 #### 1,212 ") == "1212"  # the last "####"
    assert final_answer("  42 ") == "42"  # no "####": the whole field
    assert final_answer("#### 1,2 and 3") == "1,2 and 3"  # not a number: kept as written


def test_jsonl_source_reads_gsm8k(tmp_path):
    path = write_jsonl(tmp_path / "gsm8k_tiny.jsonl", GSM8K_LINES, blank_line_after=0)
    source = JsonlSource(path)
    assert len(source) == 3
    assert [e.answer for e in source] == ["18", "2000", "-3.5"]
    assert source[0].question == GSM8K_LINES[0]["question"]
    assert source[2].metadata == GSM8K_LINES[2]
    assert {e.source for e in source} == {"gsm8k_tiny"}
    assert [e.index for e in source] == [0, 1, 2]
    assert read_prompt_jsonl(path)[1].line_number == 3  # the blank line 2 is skipped
    # Numeric scoring through math-verify, falling back to exact decimals.
    assert (source[0].score("18"), source[0].score("18.0"), source[0].score("17")) == (
        1.0,
        1.0,
        0.0,
    )
    assert (source[1].score("2,000"), source[1].score("2000")) == (1.0, 1.0)
    assert (source[2].score("-3.50"), source[2].score("3.5")) == (1.0, 0.0)


def test_jsonl_other_keys_and_numeric_answers(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [{"prompt": "1 + 1 =", "target": 2}])
    source = JsonlSource(path, question_key="prompt", answer_key="target", name="mine")
    assert (source[0].question, source[0].answer, source[0].source) == ("1 + 1 =", "2", "mine")


def test_jsonl_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        JsonlSource(tmp_path / "nope.jsonl")


def test_jsonl_bad_line_reports_line_number(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [GSM8K_LINES[0], '{"question": "q", "answer": '])
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        JsonlSource(path)
    path = write_jsonl(tmp_path / "list.jsonl", [GSM8K_LINES[0], GSM8K_LINES[1], "[1, 2]"])
    with pytest.raises(ValueError, match=r"list.jsonl:3: expected a JSON object, got list"):
        JsonlSource(path)


def test_jsonl_missing_key_is_named(tmp_path):
    path = write_jsonl(
        tmp_path / "keys.jsonl", [GSM8K_LINES[0], {"question": "q", "solution": "1"}]
    )
    with pytest.raises(
        ValueError, match=r"keys.jsonl:2: missing key 'answer'.*\['question', 'solution'\]"
    ):
        JsonlSource(path)
    with pytest.raises(ValueError, match=r"keys.jsonl:1: missing key 'prompt'"):
        JsonlSource(path, question_key="prompt")


def test_jsonl_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(ValueError, match="holds no examples"):
        JsonlSource(path)
