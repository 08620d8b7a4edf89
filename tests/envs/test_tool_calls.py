"""Parsing <tool_call> spans out of model text, rendering calls and the tools system prompt."""

import json

import pytest

from jaxrl_llm.envs.calculator import calculator_tool
from jaxrl_llm.envs.tool_calls import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    CallParse,
    ParsedCall,
    parse_tool_calls,
    render_tool_call,
    tools_system_prompt,
)
from jaxrl_llm.envs.tools import Tool

_CALC = '{"name": "calculator", "arguments": {"expression": "12*7"}}'


def test_single_call():
    parsed = parse_tool_calls(f"<tool_call>{_CALC}</tool_call>")
    assert parsed == CallParse([ParsedCall("calculator", {"expression": "12*7"})], 0, False)
    assert parsed.attempted


def test_text_around_and_several_calls_in_order():
    text = (
        "I will compute both.\n<tool_call>\n  " + _CALC + "\n</tool_call>\nand then\n"
        '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call> done.'
    )
    assert parse_tool_calls(text) == CallParse(
        [
            ParsedCall("calculator", {"expression": "12*7"}),
            ParsedCall("python", {"code": "print(1)"}),
        ],
        malformed=0,
        unclosed=False,
    )


def test_no_call():
    parsed = parse_tool_calls("The answer is 84.")
    assert parsed == CallParse([], 0, False)
    assert not parsed.attempted


def test_unclosed_call():
    parsed = parse_tool_calls(f"<tool_call>{_CALC}</tool_call> then <tool_call>{_CALC}")
    assert parsed == CallParse([ParsedCall("calculator", {"expression": "12*7"})], 0, True)
    assert parse_tool_calls("<tool_call>").attempted


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "{'name': 'calculator'}",  # Python, not JSON
        '{"arguments": {"expression": "1"}}',  # no name
        '{"name": 7, "arguments": {}}',  # name not a string
        '{"name": "  ", "arguments": {}}',
        '["calculator", {}]',  # not an object
        _CALC + "}",  # trailing junk
        "",
    ],
)
def test_malformed_bodies_are_counted(body):
    parsed = parse_tool_calls(f"<tool_call>{body}</tool_call><tool_call>{_CALC}</tool_call>")
    assert parsed.calls == [ParsedCall("calculator", {"expression": "12*7"})]
    assert (parsed.malformed, parsed.unclosed, parsed.attempted) == (1, False, True)


def test_reopened_span_is_malformed():
    parsed = parse_tool_calls(f'<tool_call>{{"name": "x"<tool_call>{_CALC}</tool_call>')
    assert parsed == CallParse([ParsedCall("calculator", {"expression": "12*7"})], 1, False)


@pytest.mark.parametrize(
    "body, arguments",
    [
        ('{"name": "f", "arguments": "{\\"a\\": 1}"}', {"a": 1}),  # JSON-encoded string
        ('{"name": "f", "parameters": {"a": 1}}', {"a": 1}),  # synonym key
        ('{"name": "f"}', {}),  # missing arguments
        ('{"name": "f", "arguments": "a=1"}', "a=1"),  # left for call_tool to refuse
        ('{"name": "f", "arguments": [1, 2]}', [1, 2]),
        ('{"name": "f", "arguments": {"a": 1}, "parameters": {"b": 2}}', {"a": 1}),
    ],
)
def test_argument_forms(body, arguments):
    assert parse_tool_calls(f"<tool_call>\n{body}\n</tool_call>").calls == [
        ParsedCall("f", arguments)
    ]


def test_render_is_the_documented_format():
    assert render_tool_call("calculator", {"expression": "12*7"}) == (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>'
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"expression": "12*7"},
        {},
        {"code": 'print("é ✓")\nx = {"a": [1, 2.5, None, True]}'},
        {"code": f"s = '{TOOL_CALL_OPEN}x{TOOL_CALL_CLOSE}'"},  # the tags inside an argument
    ],
)
def test_round_trip(arguments):
    text = render_tool_call("python", arguments)
    assert text.count(TOOL_CALL_CLOSE) == 1
    assert parse_tool_calls(text) == CallParse([ParsedCall("python", arguments)], 0, False)


def test_system_prompt_lists_schemas_and_explains_the_format():
    echo = Tool(
        name="echo",
        description="Returns its text.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["text", "n"],
        },
        fn=lambda text, n: text * n,
    )
    prompt = tools_system_prompt([echo, calculator_tool()], preamble="Solve the task.")
    assert prompt.startswith("Solve the task.\n\n# Tools\n")
    listed = prompt.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in listed] == [echo.schema(), calculator_tool().schema()]
    assert (
        '<tool_call>{"name": "echo", "arguments": {"text": "<text>", "n": 1}}</tool_call>' in prompt
    )
    assert 'a message from the "tool" role' in prompt
    assert tools_system_prompt([echo]).startswith("# Tools\n")
    with pytest.raises(ValueError, match="at least one tool"):
        tools_system_prompt([])
