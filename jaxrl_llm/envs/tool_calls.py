"""The tool-call text format: parsing calls out of model text, rendering calls and tool lists.

One format, the Hermes / Qwen2.5 one, used when a chat template has no tool section of its own.
A call is a JSON object between tags:

    <tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>

Parsing is lenient where models commonly wander and strict elsewhere:
- whitespace and newlines around the JSON are ignored;
- "arguments" may be missing (taken as {}), may be called "parameters", and may be a
  JSON-encoded string (decoded; a string that does not decode is passed on as is, and
  `tools.call_tool` then answers BAD_ARGUMENTS so the model learns why);
- a span runs from an opening tag to the next closing tag; one whose body is not one JSON object
  with a non-empty string "name" counts as malformed, and when such a body holds another opening
  tag (an abandoned call, then a fresh one) the span from that inner tag is tried next;
- an opening tag with no closing tag after it marks the parse `unclosed`.
Tool results go back to the model in a message from the "tool" role.

Example:
  >>> parse_tool_calls('Let me compute. <tool_call>{"name": "calculator", '
  ...                  '"arguments": {"expression": "12*7"}}</tool_call>')
  CallParse(calls=[ParsedCall(name='calculator', arguments={'expression': '12*7'})],
            malformed=0, unclosed=False)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from jaxrl_llm.envs.tools import Tool

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "CallParse",
    "ParsedCall",
    "parse_tool_calls",
    "render_tool_call",
    "tools_system_prompt",
]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

# The placeholder value of each JSON type in the system prompt's example call.
_EXAMPLE_VALUES = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}


class ParsedCall(NamedTuple):
    """One well-formed call: the tool's name and its (decoded) arguments.

    `arguments` is usually a dict; it is whatever the model wrote otherwise (a list, a string
    that is not JSON), for `tools.call_tool` to refuse with a readable message.

    Example:
      >>> ParsedCall("calculator", {"expression": "1+1"}).name
      'calculator'
    """

    name: str
    arguments: Any


class CallParse(NamedTuple):
    """The tool calls found in one model turn.

    Attributes:
      calls: the well-formed calls, in order.
      malformed: how many spans had a body that is not a JSON object with a string "name".
      unclosed: an opening tag had no closing tag after it.

    Example:
      >>> parse_tool_calls("<tool_call>{oops}</tool_call>")
      CallParse(calls=[], malformed=1, unclosed=False)
    """

    calls: list[ParsedCall]
    malformed: int
    unclosed: bool

    @property
    def attempted(self) -> bool:
        """Whether the text holds any opening tag at all (well-formed or not).

        Example:
          >>> parse_tool_calls("no calls here").attempted
          False
        """
        return bool(self.calls) or self.malformed > 0 or self.unclosed


def _parse_body(body: str) -> ParsedCall | None:
    """The call in one span's body, or None when it is malformed."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    arguments = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass  # left as a string: call_tool explains that it must be an object
    return ParsedCall(name.strip(), arguments)


def parse_tool_calls(text: str) -> CallParse:
    """Finds every `<tool_call>...</tool_call>` span in `text` and decodes its JSON body.

    Args:
      text: one model turn; text before, between and after the calls is ignored.

    Returns:
      A CallParse with the well-formed calls in order, the count of malformed spans and whether
      an opening tag was left unclosed.

    Example:
      >>> parse_tool_calls('<tool_call>\\n{"name": "python", "arguments": "{\\\\"code\\\\": '
      ...                  '\\\\"print(1)\\\\"}"}\\n</tool_call>').calls
      [ParsedCall(name='python', arguments={'code': 'print(1)'})]
    """
    calls: list[ParsedCall] = []
    malformed = 0
    position = text.find(TOOL_CALL_OPEN)
    while position != -1:
        body_start = position + len(TOOL_CALL_OPEN)
        close = text.find(TOOL_CALL_CLOSE, body_start)
        if close == -1:
            return CallParse(calls, malformed, unclosed=True)
        call = _parse_body(text[body_start:close].strip())
        if call is not None:
            calls.append(call)
            position = text.find(TOOL_CALL_OPEN, close + len(TOOL_CALL_CLOSE))
            continue
        malformed += 1
        inner_open = text.find(TOOL_CALL_OPEN, body_start, close)
        if inner_open != -1:
            position = inner_open  # an abandoned span, then a fresh one: try the fresh one
        else:
            position = text.find(TOOL_CALL_OPEN, close + len(TOOL_CALL_CLOSE))
    return CallParse(calls, malformed, unclosed=False)


def render_tool_call(name: str, arguments: dict) -> str:
    """The canonical text of one call, as a model should write it.

    The JSON is `json.dumps` with non-ASCII characters kept; a "</" inside it is written "<\\/"
    (the same JSON string) so an argument containing the closing tag cannot end the span early.

    Example:
      >>> render_tool_call("calculator", {"expression": "12*7"})
      '<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>'
    """
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    body = body.replace("</", "<\\/")
    return f"{TOOL_CALL_OPEN}{body}{TOOL_CALL_CLOSE}"


def _example_arguments(tool: Tool) -> dict:
    """Placeholder arguments for the required parameters of `tool` (strings as "<name>")."""
    properties = tool.parameters.get("properties", {})
    example = {}
    for key in tool.parameters.get("required", []):
        types = properties.get(key, {}).get("type", "string")
        first = types if isinstance(types, str) else (types[0] if types else "string")
        example[key] = _EXAMPLE_VALUES.get(first, f"<{key}>")
    return example


def tools_system_prompt(tools: Sequence[Tool], *, preamble: str = "") -> str:
    """Text for a system message that lists the tools and explains how to call them.

    Each tool's JSON schema (`Tool.schema()`) goes on its own line inside `<tools>` tags,
    followed by the call format with one example (the first tool, placeholder arguments) and a
    note that results come back in a message from the "tool" role.

    Args:
      tools: the tools the model may call (at least one).
      preamble: text put first (the task's own instructions), separated by a blank line.

    Example:
      >>> print(tools_system_prompt([calculator_tool()]))
      # Tools
      <BLANKLINE>
      You may call one or more tools to help with the user's request. ...
    """
    if not tools:
        raise ValueError("tools_system_prompt: give at least one tool.")
    schemas = "\n".join(json.dumps(tool.schema(), ensure_ascii=False) for tool in tools)
    example = render_tool_call(tools[0].name, _example_arguments(tools[0]))
    sections = [
        "# Tools",
        "You may call one or more tools to help with the user's request. "
        "The tools are described by these JSON schemas, one per line, within <tools></tools> tags:\n"
        f"<tools>\n{schemas}\n</tools>",
        "To call a tool, write a JSON object with the tool's name and its arguments within "
        f"{TOOL_CALL_OPEN}{TOOL_CALL_CLOSE} tags, for example:\n{example}",
        "You may write several calls in one turn. Each result comes back to you in a message "
        'from the "tool" role, in the order of the calls. When you have what you need, answer '
        "without a tool call.",
    ]
    text = "\n\n".join(sections)
    return f"{preamble.rstrip()}\n\n{text}" if preamble.strip() else text
