"""The calculator evaluates exact arithmetic and refuses everything else quickly and readably."""

import time

import pytest

from jaxrl_llm.envs import calculator
from jaxrl_llm.envs.calculator import CalculatorError, evaluate_expression, format_result
from jaxrl_llm.envs.tools import ToolStatus, call_tool


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("123*4567", 561741),
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("-(2 + 3) * 4 // 3", -7),  # floor division rounds towards minus infinity
        ("-3 ** 2", -9),  # power binds tighter than unary minus
        ("+5 - -2", 7),
        ("17 % 5", 2),
        ("2 ** 10", 1024),
        ("2^10", 1024),  # ^ is power, not xor
        ("2 ** -2", 0.25),
        ("7 / 2", 3.5),
        ("1_000 * 3", 3000),
        ("2e3 + 0.5", 2000.5),
        ("  \n 1 + 1 \n", 2),
    ],
)
def test_exact_values(expression, expected):
    value = evaluate_expression(expression)
    assert value == expected
    assert type(value) is type(expected)


def test_big_integers_stay_exact():
    assert evaluate_expression("2**100 + 1") == 1267650600228229401496703205377
    assert evaluate_expression("99999999999999999 * 99999999999999999") == (10**17 - 1) ** 2


@pytest.mark.parametrize(
    "value, text",
    [
        (2.0, "2"),
        (3.5, "3.5"),
        (2**70, "1180591620717411303424"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e20, "1e+20"),
        (-4.0, "-4"),
    ],
)
def test_format_result(value, text):
    assert format_result(value) == text


@pytest.mark.parametrize(
    "expression, message",
    [
        ("__import__('os')", "function calls are not allowed"),
        ("x + 1", "names (variables) are not allowed"),
        ("(1).real", "attribute access is not allowed"),
        ("1,000", "write 1000, not 1,000"),
        ("1 < 2", "comparisons are not allowed"),
        ("'a' * 3", "only numbers are allowed, got 'a'"),
        ("True + 1", "only numbers are allowed, got True"),
        ("1j", "only numbers are allowed, got 1j"),
        ("9**9**9", "the power is too large"),
        ("2**4096", "more than 4096 bits"),
        ("1e308 * 10", "too large for a float"),
        ("(-8) ** (1/3)", "not a real number"),
        ("1/0", "division by zero"),
        ("5 // 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("", "the expression is empty"),
        ("   ", "the expression is empty"),
        ("1 +", "not a valid expression"),
        ("1" * 201, "201 characters; the limit is 200"),
    ],
)
def test_refusals_name_the_reason(expression, message):
    start = time.perf_counter()
    with pytest.raises(CalculatorError, match=None) as info:
        evaluate_expression(expression)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)
    assert time.perf_counter() - start < 0.5  # refused before any big work


def test_calculator_tool_through_call_tool():
    tools = {"calculator": calculator.calculator_tool()}
    ok = call_tool(tools, "calculator", {"expression": "(12 + 7) * 3 / 2"})
    assert (ok.status, ok.output) == (ToolStatus.OK, "28.5")
    failed = call_tool(tools, "calculator", {"expression": "1/0"})
    assert (failed.status, failed.output) == (
        ToolStatus.ERROR,
        "error: CalculatorError: division by zero",
    )
    assert tools["calculator"].schema()["function"]["parameters"]["required"] == ["expression"]
