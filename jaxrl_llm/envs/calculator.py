"""A safe arithmetic calculator tool: `ast`-walked, never `eval`, with bounded work.

Accepted: int and float literals (`12`, `1.5`, `2e3`, `1_000`), the binary operators
`+ - * / // % **`, unary `+` and `-`, and parentheses. `^` means power (`2^10` is 1024), since a
model writing `^` in a calculator never means Python's bitwise xor; it is rewritten to `**`
before parsing. Everything else is refused with a `CalculatorError` that says what was found:
names and calls (`__import__('os')`), attributes, comparisons, commas (`1,000`), complex
numbers, strings.

Resource guards, each checked before the work is done:
- the expression is at most `MAX_EXPRESSION_CHARS` (200) characters;
- integer results stay exact Python ints of at most `MAX_INT_BITS` (4096) bits (about 1233
  decimal digits). A power is refused when the base's bit length times the exponent passes that
  bound, so `9**9**9` fails at once instead of hanging; bases 0, 1 and -1 take any exponent;
- float results must be finite (an overflow is an error, not `inf`).

Division by zero (`/`, `//`, `%`, and `0 ** -1`) is a clear error. `/` is true division, so
`6/3` is the float 2.0; `format_result` prints integral floats below 1e16 without the ".0"
("2"), other floats with `repr`, ints exactly.

Example:
  >>> evaluate_expression("123*4567")
  561741
  >>> format_result(evaluate_expression("(1 + 2) / 4"))
  '0.75'
"""

from __future__ import annotations

import ast
import math
import operator

from jaxrl_llm.envs.tools import Tool

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_INT_BITS",
    "CalculatorError",
    "calculator_tool",
    "evaluate_expression",
    "format_result",
]

MAX_EXPRESSION_CHARS = 200
MAX_INT_BITS = 4096

_BINARY_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPS = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_ALLOWED = "numbers, + - * / // % ** (or ^) and parentheses"

# What the nodes a model is most likely to try are called, for the refusal message.
_NODE_NAMES = {
    ast.Name: "names (variables) are",
    ast.Call: "function calls are",
    ast.Attribute: "attribute access is",
    ast.Subscript: "indexing is",
    ast.Compare: "comparisons are",
    ast.BoolOp: "and/or are",
    ast.Tuple: "commas are",
    ast.List: "lists are",
    ast.Lambda: "lambdas are",
    ast.IfExp: "if-expressions are",
}


class CalculatorError(ValueError):
    """An expression the calculator refuses or cannot evaluate; the message says why.

    Example:
      >>> evaluate_expression("1/0")
      Traceback (most recent call last):
      CalculatorError: division by zero
    """


def _check_size(value: int | float) -> int | float:
    """Refuses non-finite floats and ints past MAX_INT_BITS."""
    if isinstance(value, complex):
        raise CalculatorError(
            "the result is not a real number (a negative base to a fractional power)"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is too large for a float")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculatorError(f"the result is too large (more than {MAX_INT_BITS} bits)")
    return value


def _power(base: int | float, exponent: int | float) -> int | float:
    """`base ** exponent`, refused before computing when an int result would pass MAX_INT_BITS."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if (abs(base).bit_length() - 1) * exponent > MAX_INT_BITS:
            raise CalculatorError(
                f"the power is too large: the result would have more than {MAX_INT_BITS} bits"
            )
    return base**exponent


def _evaluate(node: ast.AST) -> int | float:
    """Evaluates one allowed node; refuses every other kind."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"only numbers are allowed, got {node.value!r}")
        return _check_size(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        try:
            if isinstance(node.op, ast.Pow):
                return _check_size(_power(left, right))
            return _check_size(_BINARY_OPS[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("the result is too large for a float") from None
    what = _NODE_NAMES.get(type(node), f"{type(node).__name__} expressions are")
    hint = " (write 1000, not 1,000)" if isinstance(node, ast.Tuple) else ""
    raise CalculatorError(f"{what} not allowed{hint}; use only {_ALLOWED}")


def evaluate_expression(expression: str) -> int | float:
    """Evaluates an arithmetic expression exactly (ints) or in float64 (anything with / or a float).

    Args:
      expression: e.g. "3 * (4 + 5) - 2^3"; see the module docstring for what is accepted.

    Returns:
      An int when every step stays integral (ints are exact, any size up to MAX_INT_BITS),
      else a float.

    Raises:
      CalculatorError: a ValueError whose message says what was refused and why.

    Example:
      >>> evaluate_expression("-(2 + 3) * 4 // 3")
      -7
    """
    if not isinstance(expression, str):
        raise CalculatorError(f"the expression must be a string, got {type(expression).__name__}")
    if not expression.strip():
        raise CalculatorError("the expression is empty; write one such as 12*7")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(
            f"the expression has {len(expression)} characters; the limit is {MAX_EXPRESSION_CHARS}"
        )
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise CalculatorError(f"not a valid expression ({detail}); use only {_ALLOWED}") from None
    try:
        return _evaluate(tree.body)
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None


def format_result(value: int | float) -> str:
    """The text of a result: ints exactly, integral floats below 1e16 as ints, other floats by repr.

    Example:
      >>> format_result(6 / 3), format_result(7 / 2), format_result(2**70)
      ('2', '3.5', '1180591620717411303424')
    """
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def calculator_tool(*, timeout_s: float = 1.0) -> Tool:
    """The "calculator" tool: one required string parameter "expression", answers its value.

    A refused expression reaches the model as "error: CalculatorError: <why>".

    Example:
      >>> from jaxrl_llm.envs.tools import call_tool
      >>> call_tool({"calculator": calculator_tool()}, "calculator", {"expression": "2^10"}).output
      '1024'
    """
    return Tool(
        name="calculator",
        description=(
            "Evaluates an arithmetic expression exactly and returns its value. Supports numbers, "
            "+ - * / // % ** (or ^ for power) and parentheses; no variables or functions."
        ),
        parameters={
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "The expression, for example (12 + 7) * 3 / 2",
                }
            },
            "required": ["expression"],
        },
        fn=lambda expression: format_result(evaluate_expression(expression)),
        timeout_s=timeout_s,
    )
