"""call_tool answers every call with a ToolResult: validation, errors, time limits, truncation."""

import time

import pytest

from jaxrl_llm.envs.tools import (
    Tool,
    ToolError,
    ToolStatus,
    ToolTimeoutError,
    call_tool,
    tools_by_name,
    truncate_text,
)

_SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "scale": {"type": "number"},
        "label": {"type": "string"},
        "flag": {"type": "boolean"},
        "items": {"type": "array"},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
    },
    "required": ["count"],
}


def _tool(function, **overrides):
    fields = dict(name="probe", description="A test tool.", parameters=_SCHEMA, fn=function)
    return Tool(**{**fields, **overrides})


def _raise_value_error(count):
    raise ValueError(f"count {count} is cursed")


def test_ok_result_is_text():
    tools = tools_by_name([_tool(lambda count, **kw: count * 2)])
    result = call_tool(tools, "probe", {"count": 21, "scale": 1.5, "label": "x", "flag": True})
    assert (result.status, result.output, result.truncated) == (ToolStatus.OK, "42", False)
    assert 0 <= result.seconds < 1.0
    assert (
        call_tool({"p": _tool(lambda count: {"a": [1, True]}, name="p")}, "p", {"count": 1}).output
        == '{"a": [1, true]}'
    )
    assert call_tool({"p": _tool(lambda count: None, name="p")}, "p", {"count": 1}).output == ""


def test_status_values_are_metric_names():
    assert [s.value for s in ToolStatus] == [
        "ok",
        "error",
        "timeout",
        "bad_arguments",
        "unknown_tool",
    ]


def test_tool_that_raises_reports_the_exception():
    result = call_tool({"probe": _tool(_raise_value_error)}, "probe", {"count": 3})
    assert result.status == ToolStatus.ERROR
    assert result.output == "error: ValueError: count 3 is cursed"


def test_tool_errors_speak_for_themselves():
    def fail(count):
        raise ToolError("no such row; rows are 1-3")

    def slow(count):
        raise ToolTimeoutError("the query ran past 2 s")

    tools = {"fail": _tool(fail, name="fail"), "slow": _tool(slow, name="slow")}
    assert call_tool(tools, "fail", {"count": 1})[:2] == (
        ToolStatus.ERROR,
        "error: no such row; rows are 1-3",
    )
    assert call_tool(tools, "slow", {"count": 1})[:2] == (
        ToolStatus.TIMEOUT,
        "error: the query ran past 2 s",
    )


def test_hung_tool_times_out_quickly():
    tools = {"probe": _tool(lambda count: time.sleep(10), timeout_s=0.2)}
    start = time.perf_counter()
    result = call_tool(tools, "probe", {"count": 1})
    elapsed = time.perf_counter() - start
    assert result.status == ToolStatus.TIMEOUT
    assert result.output == "error: the tool 'probe' ran past its 0.2 s limit"
    assert 0.2 <= elapsed < 1.0
    assert 0.2 <= result.seconds < 1.0


def test_megabyte_of_output_is_truncated_with_a_marker():
    tools = {"probe": _tool(lambda count: "x" * 1_000_000, max_output_chars=2000)}
    result = call_tool(tools, "probe", {"count": 1})
    assert result.status == ToolStatus.OK
    assert result.truncated
    assert result.output == "x" * 2000 + "\n...[truncated 998000 characters]"


def test_printed_output_is_not_captured():
    # A tool's text is what it returns; print() goes to the host's stdout, not to the model.
    tools = {"probe": _tool(lambda count: print("noise") or "answer")}
    assert call_tool(tools, "probe", {"count": 1}).output == "answer"


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({}, "missing required argument 'count'"),
        ({"count": "3"}, "argument 'count' must be of type integer, got string"),
        ({"count": True}, "argument 'count' must be of type integer, got boolean"),
        ({"count": 1.5}, "argument 'count' must be of type integer, got number"),
        ({"count": 1, "scale": "big"}, "argument 'scale' must be of type number, got string"),
        ({"count": 1, "flag": 1}, "argument 'flag' must be of type boolean, got integer"),
        ({"count": 1, "items": {"a": 1}}, "argument 'items' must be of type array, got object"),
        (
            {"count": 1, "mode": "medium"},
            "argument 'mode' must be one of ['fast', 'slow'], got 'medium'",
        ),
        (
            {"count": 1, "colour": "red"},
            "unexpected argument 'colour'; the arguments are ['count', 'flag', 'items', 'label', 'mode', 'scale']",
        ),
        ([1, 2], "arguments must be a JSON object of named arguments, got list"),
        ('{"count": 1}', "arguments must be a JSON object of named arguments, got a JSON string"),
        (None, "arguments must be a JSON object of named arguments, got NoneType"),
    ],
)
def test_bad_arguments_name_the_field(arguments, message):
    called = []
    result = call_tool({"probe": _tool(lambda **kw: called.append(kw))}, "probe", arguments)
    assert result.status == ToolStatus.BAD_ARGUMENTS
    assert result.output == f"error: bad arguments for tool 'probe': {message}"
    assert called == []  # the function never ran


def test_integer_is_a_number_and_extra_keys_can_be_allowed():
    schema = {
        "type": "object",
        "properties": {"x": {"type": ["number", "null"]}},
        "additionalProperties": True,
    }
    tools = {"probe": _tool(lambda **kw: sorted(kw.items()), parameters=schema)}
    assert call_tool(tools, "probe", {"x": 3, "y": 1}).output == '[["x", 3], ["y", 1]]'
    assert call_tool(tools, "probe", {"x": None}).status == ToolStatus.OK


def test_unknown_tool_lists_the_known_names():
    tools = tools_by_name([_tool(len, name="beta"), _tool(len, name="alpha")])
    result = call_tool(tools, "gamma", {})
    assert result.status == ToolStatus.UNKNOWN_TOOL
    assert result.output == "error: unknown tool 'gamma'; the tools are: alpha, beta"
    assert call_tool({}, "gamma", {}).output == "error: unknown tool 'gamma'; there are no tools"
    assert call_tool(tools, None, {}).status == ToolStatus.UNKNOWN_TOOL


def test_schema_is_the_function_tool_format():
    tool = _tool(len)
    assert tool.schema() == {
        "type": "function",
        "function": {"name": "probe", "description": "A test tool.", "parameters": _SCHEMA},
    }


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"name": ""}, "name must be a non-empty string"),
        ({"name": "9lives"}, "name must match"),
        ({"name": "has space"}, "name must match"),
        ({"parameters": {"type": "string"}}, "parameters must be a JSON schema of an object"),
        (
            {"parameters": {"type": "object", "properties": {"a": {"type": "float"}}}},
            "has type 'float'",
        ),
        (
            {"parameters": {"type": "object", "properties": {}, "required": ["a"]}},
            "not in parameters['properties']",
        ),
        ({"timeout_s": 0}, "timeout_s=0 must be a number > 0"),
        ({"timeout_s": -1.0}, "timeout_s=-1.0 must be a number > 0"),
        ({"max_output_chars": 0}, "max_output_chars=0 must be an int > 0"),
        ({"fn": "not callable"}, "fn must be callable"),
    ],
)
def test_malformed_tool_is_refused_at_construction(overrides, message):
    with pytest.raises(ValueError) as info:
        _tool(len, **overrides)
    assert message in str(info.value)


def test_tools_by_name_refuses_duplicates():
    assert list(tools_by_name([_tool(len, name="a"), _tool(len, name="b-2")])) == ["a", "b-2"]
    with pytest.raises(ValueError, match="two tools are named 'a'"):
        tools_by_name([_tool(len, name="a"), _tool(len, name="a")])


def test_truncate_text():
    assert truncate_text("abcdef", 2) == ("ab\n...[truncated 4 characters]", True)
    assert truncate_text("abc", 3) == ("abc", False)
