"""Answer extraction: last number (signs, decimals, thousands separators) and tagged spans."""

import pytest

from jaxrl_llm.rewards import (
    extract_answer,
    extract_last_number,
    extract_tagged_answer,
    find_numbers,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("So 3 + 4 = 7, minus 11 gives -4.", "-4"),
        ("The answer is 42.", "42"),  # trailing period
        ("Total: $1,234.50.", "1234.50"),  # thousands separator, decimals kept as written
        ("2,000,000 people", "2000000"),
        ("It is 3.14159", "3.14159"),
        ("Half is .5", ".5"),
        ("x = -0.25\n", "-0.25"),
        ("\u221212 degrees", "-12"),  # Unicode minus
        ("5-3", "3"),  # a minus after a digit is subtraction
        ("x-3", "3"),  # ... and after a letter
        ("a=-7", "-7"),
        ("1, 2, 3", "3"),  # a list is not a thousands-separated number
        ("12,3456", "3456"),  # neither is this
        ("version 1.2.3", "1.2"),
        ("no digits here", None),
        ("", None),
    ],
)
def test_extract_last_number(text, expected):
    assert extract_last_number(text) == expected


def test_find_numbers_in_order():
    assert find_numbers("Take 1,234 apples, eat -5.5 and 3.") == ["1234", "-5.5", "3"]
    assert find_numbers("4 + 3 = 7") == ["4", "3", "7"]


def test_extract_tagged_answer():
    assert extract_tagged_answer("<think>2+2</think><answer> 4 </answer>") == "4"
    assert extract_tagged_answer("<answer>1</answer> then <answer>\n2\n</answer>") == "2"  # last
    assert extract_tagged_answer("<answer>unclosed") is None
    assert extract_tagged_answer("[x]<final>9</final>", tag="final") == "9"


def test_extract_answer_prefers_tag_then_number_then_text():
    assert extract_answer("3 + 4 = 7 <answer>seven</answer>") == "seven"
    assert extract_answer("3 + 4 = 7") == "7"
    assert extract_answer("  seven \n") == "seven"
