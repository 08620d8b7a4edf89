"""Tools a model can call during an episode, and `call_tool`, which never raises for bad input.

A `Tool` is a name, a description, a JSON schema of its arguments and a Python function. The
episode engine parses the model's calls (`tool_calls.parse_tool_calls`) and hands each one to
`call_tool`, which returns a `ToolResult`: a status (its value string is a metric name) and the
text shown to the model. Whatever the model writes, `call_tool` answers with a result, never an
exception:

- an unknown name gives `UNKNOWN_TOOL` and lists the known names;
- arguments that are not a JSON object, miss a required key, carry an unexpected key or have the
  wrong JSON type give `BAD_ARGUMENTS` and name the field (only the top-level keys are checked:
  their JSON `type`, which may be a list of types, and `enum`; nested schemas are not);
- an exception inside the tool gives `ERROR` with `"error: <Type>: <message>"`; a tool that
  raises `ToolError` speaks for itself (`"error: <message>"`), and one that raises
  `ToolTimeoutError` reports `TIMEOUT` the same way;
- a call that runs past `Tool.timeout_s` gives `TIMEOUT`;
- output longer than `Tool.max_output_chars` is cut, with a marker saying how much was dropped.

Time limits are thread-based: each call runs in its own daemon thread and `call_tool` stops
waiting `timeout_s` seconds after the start. Python cannot kill a thread, so a hung pure-Python
function is abandoned, not stopped: it keeps running (and taking a share of the GIL) until it
returns or the process exits; being a daemon thread it never blocks exit. Tools that can really
hang or loop (running model-written code, say) must bound their own work in a subprocess, as
`sandbox.python_sandbox_tool` does.

Example:
  >>> add = Tool(
  ...     name="add",
  ...     description="Adds two integers.",
  ...     parameters={
  ...         "type": "object",
  ...         "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
  ...         "required": ["a", "b"],
  ...     },
  ...     fn=lambda a, b: a + b,
  ... )
  >>> call_tool({"add": add}, "add", {"a": 2, "b": 3}).output
  '5'
"""

from __future__ import annotations

import dataclasses
import enum
import json
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "Tool",
    "ToolError",
    "ToolResult",
    "ToolStatus",
    "ToolTimeoutError",
    "call_tool",
    "tools_by_name",
    "truncate_text",
]

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

# JSON schema type name -> check of a decoded JSON value. bool is a subclass of int in Python,
# so it is excluded by hand from "integer" and "number" (JSON has a separate boolean type).
_JSON_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, Mapping),
    "null": lambda v: v is None,
}


class ToolStatus(enum.Enum):
    """How a tool call ended; the value strings are metric names.

    Example:
      >>> ToolStatus.BAD_ARGUMENTS.value
      'bad_arguments'
    """

    OK = "ok"
    ERROR = "error"  # the tool raised
    TIMEOUT = "timeout"  # ran past its time limit
    BAD_ARGUMENTS = "bad_arguments"  # not a JSON object, missing/extra keys, wrong types
    UNKNOWN_TOOL = "unknown_tool"


class ToolError(Exception):
    """Raised by a tool to report a failure in its own words: the model reads `"error: <message>"`.

    Example:
      >>> def lookup(key):
      ...     raise ToolError(f"no entry {key!r}; known keys: a, b")
    """


class ToolTimeoutError(ToolError):
    """Raised by a tool that enforces its own time limit (a subprocess, say): status `TIMEOUT`.

    Example:
      >>> raise ToolTimeoutError("the code ran past its 5 s limit")
    """


@dataclasses.dataclass(frozen=True)
class Tool:
    """A function the model can call, with the JSON schema of its keyword arguments.

    Construction validates the fields and raises ValueError naming the field and the fix.

    Attributes:
      name: matches `^[A-Za-z_][A-Za-z0-9_-]*$`; the name the model calls.
      description: one or two sentences telling the model what the tool does.
      parameters: JSON schema of an object:
        `{"type": "object", "properties": {...}, "required": [...]}`. Unexpected keys are refused
        unless it sets `"additionalProperties": true`.
      fn: called with the arguments as keywords; its result becomes the text the model reads
        (a str as is, a dict or list as JSON, None as "", anything else through `str`).
      timeout_s: seconds `call_tool` waits for `fn` before it reports `TIMEOUT`.
      max_output_chars: longer output is cut to this many characters plus a marker.

    Example:
      >>> echo = Tool(
      ...     name="echo",
      ...     description="Returns its text.",
      ...     parameters={
      ...         "type": "object",
      ...         "properties": {"text": {"type": "string"}},
      ...         "required": ["text"],
      ...     },
      ...     fn=lambda text: text,
      ... )
      >>> echo.schema()["function"]["name"]
      'echo'
    """

    name: str
    description: str
    parameters: dict
    fn: Callable[..., Any]
    timeout_s: float = 5.0
    max_output_chars: int = 2000

    def __post_init__(self):
        _validate_tool(self)

    def schema(self) -> dict:
        """The OpenAI / Hugging Face "function" tool schema (what chat templates take as `tools`).

        Example:
          >>> echo.schema()
          {'type': 'function', 'function': {'name': 'echo', 'description': 'Returns its text.',
           'parameters': {...}}}
        """
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def _validate_tool(tool: Tool) -> None:
    """Raises ValueError naming the first malformed field of `tool`."""
    where = f"Tool(name={tool.name!r})"
    if not isinstance(tool.name, str) or not tool.name:
        raise ValueError(f"{where}: name must be a non-empty string.")
    if not TOOL_NAME_PATTERN.match(tool.name):
        raise ValueError(
            f"{where}: name must match {TOOL_NAME_PATTERN.pattern} (letters, digits, '_' and "
            "'-', not starting with a digit or '-')."
        )
    if not isinstance(tool.description, str):
        raise ValueError(f"{where}: description must be a string, got {type(tool.description)}.")
    if not callable(tool.fn):
        raise ValueError(f"{where}: fn must be callable, got {type(tool.fn)}.")
    if not isinstance(tool.timeout_s, int | float) or not tool.timeout_s > 0:
        raise ValueError(f"{where}: timeout_s={tool.timeout_s!r} must be a number > 0.")
    if not isinstance(tool.max_output_chars, int) or tool.max_output_chars <= 0:
        raise ValueError(f"{where}: max_output_chars={tool.max_output_chars!r} must be an int > 0.")
    params = tool.parameters
    if not isinstance(params, Mapping) or params.get("type") != "object":
        raise ValueError(
            f"{where}: parameters must be a JSON schema of an object, "
            '{"type": "object", "properties": {...}, "required": [...]}; '
            f"got {params!r}."
        )
    properties = params.get("properties", {})
    if not isinstance(properties, Mapping):
        raise ValueError(f"{where}: parameters['properties'] must be a dict of name -> schema.")
    for key, prop in properties.items():
        if not isinstance(prop, Mapping):
            raise ValueError(f"{where}: parameters['properties'][{key!r}] must be a dict schema.")
        for type_name in _type_names(prop):
            if type_name not in _JSON_TYPE_CHECKS:
                raise ValueError(
                    f"{where}: parameters['properties'][{key!r}] has type {type_name!r}; "
                    f"use one of {sorted(_JSON_TYPE_CHECKS)}."
                )
    required = params.get("required", [])
    if not isinstance(required, list | tuple) or not all(isinstance(k, str) for k in required):
        raise ValueError(f"{where}: parameters['required'] must be a list of property names.")
    missing = [k for k in required if k not in properties]
    if missing:
        raise ValueError(
            f"{where}: parameters['required'] names {missing}, which are not in "
            "parameters['properties']; add them there."
        )


def _type_names(prop: Mapping) -> list[str]:
    """The JSON type names a property schema allows ([] when it sets no type)."""
    types = prop.get("type", [])
    return [types] if isinstance(types, str) else list(types)


class ToolResult(NamedTuple):
    """The outcome of one tool call.

    Attributes:
      status: how the call ended.
      output: the text shown to the model; for failures a short message it can read, such as
        "error: ZeroDivisionError: division by zero".
      truncated: the output was cut to the tool's `max_output_chars` (a marker was appended).
      seconds: wall time of the call (up to the time limit for a timeout).

    Example:
      >>> call_tool({}, "nope", {})
      ToolResult(status=<ToolStatus.UNKNOWN_TOOL: 'unknown_tool'>,
                 output="error: unknown tool 'nope'; there are no tools", truncated=False, ...)
    """

    status: ToolStatus
    output: str
    truncated: bool
    seconds: float


def tools_by_name(tools: Sequence[Tool]) -> dict[str, Tool]:
    """The name -> tool mapping that `call_tool` takes; refuses two tools with one name.

    Example:
      >>> tools_by_name([calculator_tool()])
      {'calculator': Tool(name='calculator', ...)}
    """
    by_name: dict[str, Tool] = {}
    for tool in tools:
        if not isinstance(tool, Tool):
            raise ValueError(f"tools_by_name: expected Tool instances, got {type(tool)}.")
        if tool.name in by_name:
            raise ValueError(f"tools_by_name: two tools are named {tool.name!r}; rename one.")
        by_name[tool.name] = tool
    return by_name


def truncate_text(text: str, max_chars: int) -> tuple[str, bool]:
    """Cuts `text` to its first `max_chars` characters plus a marker saying how many were dropped.

    Returns:
      (text, truncated): the text (unchanged when short enough) and whether it was cut.

    Example:
      >>> truncate_text("abcdef", 2)
      ('ab\\n...[truncated 4 characters]', True)
    """
    if len(text) <= max_chars:
        return text, False
    return f"{text[:max_chars]}\n...[truncated {len(text) - max_chars} characters]", True


def _output_text(value: Any) -> str:
    """The text the model reads for a tool's return value."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, dict | list):
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _argument_error(tool: Tool, arguments: Any) -> str | None:
    """Why `arguments` do not fit `tool.parameters`, naming the field; None when they fit."""
    if not isinstance(arguments, Mapping):
        kind = "a JSON string" if isinstance(arguments, str) else type(arguments).__name__
        return f"arguments must be a JSON object of named arguments, got {kind}"
    properties = tool.parameters.get("properties", {})
    for key in tool.parameters.get("required", []):
        if key not in arguments:
            return f"missing required argument {key!r}"
    if tool.parameters.get("additionalProperties") is not True:
        extra = [key for key in arguments if key not in properties]
        if extra:
            return f"unexpected argument {extra[0]!r}; the arguments are {sorted(properties)}"
    for key, value in arguments.items():
        prop = properties.get(key, {})
        types = _type_names(prop)
        if types and not any(_JSON_TYPE_CHECKS[t](value) for t in types):
            wanted = " or ".join(types)
            return f"argument {key!r} must be of type {wanted}, got {_json_type_name(value)}"
        if "enum" in prop and value not in prop["enum"]:
            return f"argument {key!r} must be one of {prop['enum']}, got {value!r}"
    return None


def _json_type_name(value: Any) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if _JSON_TYPE_CHECKS[name](value):
            return name
    return type(value).__name__


def _run_with_timeout(fn: Callable[[], Any], timeout_s: float) -> tuple[str, Any]:
    """Runs `fn` in a daemon thread: ("ok", value), ("raised", exception) or ("timeout", None)."""
    done: queue.Queue = queue.Queue(maxsize=1)

    def target():
        try:
            done.put(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - reported to the model, never re-raised
            done.put(("raised", exc))

    threading.Thread(target=target, name="jaxrl_llm-tool", daemon=True).start()
    try:
        return done.get(timeout=timeout_s)
    except queue.Empty:
        return "timeout", None


def call_tool(tools: Mapping[str, Tool], name: str, arguments: Any) -> ToolResult:
    """Calls `tools[name](**arguments)` with validation, a time limit and an output cap.

    Never raises for anything the model wrote: see the module docstring for each failure's
    status and message.

    Args:
      tools: name -> Tool (see `tools_by_name`).
      name: the tool the model called.
      arguments: the decoded arguments; must be a JSON object (dict) fitting the tool's schema.

    Returns:
      A ToolResult; its output is at most `max_output_chars` plus the truncation marker.

    Example:
      >>> calc = calculator_tool()
      >>> call_tool({"calculator": calc}, "calculator", {"expression": "12*7"})
      ToolResult(status=<ToolStatus.OK: 'ok'>, output='84', truncated=False, seconds=0.0003)
      >>> call_tool({"calculator": calc}, "calculator", {"expr": "1"}).output
      "error: bad arguments for tool 'calculator': missing required argument 'expression'"
    """
    start = time.perf_counter()
    tool = tools.get(name) if isinstance(name, str) else None
    if tool is None:
        known = ", ".join(sorted(tools)) if tools else ""
        listing = f"the tools are: {known}" if known else "there are no tools"
        message = f"error: unknown tool {name!r}; {listing}"
        return ToolResult(ToolStatus.UNKNOWN_TOOL, message, False, time.perf_counter() - start)

    def finish(status: ToolStatus, text: str) -> ToolResult:
        text, truncated = truncate_text(text, tool.max_output_chars)
        return ToolResult(status, text, truncated, time.perf_counter() - start)

    problem = _argument_error(tool, arguments)
    if problem is not None:
        return finish(
            ToolStatus.BAD_ARGUMENTS, f"error: bad arguments for tool {name!r}: {problem}"
        )

    kwargs = dict(arguments)
    outcome, value = _run_with_timeout(lambda: _output_text(tool.fn(**kwargs)), tool.timeout_s)
    if outcome == "ok":
        return finish(ToolStatus.OK, value)
    if outcome == "timeout":
        return finish(
            ToolStatus.TIMEOUT, f"error: the tool {name!r} ran past its {tool.timeout_s:g} s limit"
        )
    if isinstance(value, ToolTimeoutError):
        return finish(ToolStatus.TIMEOUT, f"error: {value}")
    if isinstance(value, ToolError):
        return finish(ToolStatus.ERROR, f"error: {value}")
    return finish(ToolStatus.ERROR, f"error: {type(value).__name__}: {value}")
