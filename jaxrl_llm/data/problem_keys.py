"""Canonical problem keys: one string per problem, the same for every wording of it.

The split (`jaxrl_llm.data.split`) hashes a problem's key, not its question text, so problems
that are the same up to the task's symmetry land on one side: gcd(12, 18) and gcd(18, 12);
"7 + 3" and "3 + 7" (but not "7 - 3" and "3 - 7"); "Solve for x: x + 3 = 5" and "Find the
value of y in the equation: y + 3 = 5". A key function reads one reasoning-gym entry (a dict
with "question", "answer" and "metadata") and returns its key, mostly from reasoning-gym's
metadata:

    commutative operands (gcd, lcm)   the numbers, sorted
    + - * chains, left to right       each run of + / - is the multiset of its signed terms,
    (chain_sum, products, ...)        each run of * the multiset of its factors
    equations (simple_equations)      the variable renamed to x, the left side's signed terms
                                      sorted
    letter_counting, count_bits       the letter and the words (sorted, case-folded); the number

`register_problem_key(task, fn)` adds or replaces one (a reasoning-gym task or a preset name);
`problem_key_for(task)` finds it, None for a task without one (the split then falls back to the
question text and says so once). A key function must be a module-level function: a two-process
run pickles the sources that hold it.

Example:
  >>> gcd_key = problem_key_for("gcd")
  >>> gcd_key({"metadata": {"numbers": [18, 12]}}) == gcd_key({"metadata": {"numbers": [12, 18]}})
  True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = [
    "ProblemKey",
    "basic_arithmetic_key",
    "chain_key",
    "equation_key",
    "expression_key",
    "letter_counting_key",
    "number_key",
    "problem_key_for",
    "register_problem_key",
    "simple_equations_key",
    "sorted_numbers_key",
]

# entry (reasoning-gym's dict: question, answer, metadata) -> the problem's canonical key
ProblemKey = Callable[[Mapping[str, Any]], str]
_ADDITIVE = ("+", "-")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def _number(token: str) -> Decimal:
    """`token` as a Decimal, equal values one spelling (4.80 and 4.8, -0 and 0)."""
    value = Decimal(token)
    return Decimal(0) if value == 0 else value.normalize()


def _spell(value: Decimal) -> str:
    return format(value, "f")


def chain_key(expression: str) -> str | None:
    """The key of a space-separated chain of numbers and + - * operators, evaluated left to right.

    Left to right, "a op b op c" is ((a op b) op c): a run of + / - is a sum whose signed terms
    may be reordered, a run of * a product whose factors may be; a run nests the value before
    it as one term. So "7 + 3", "3 + 7" and "-3 + 7 + 3 + 3" are (or are not) one problem by
    their multisets, and "7 - 3" is not "3 - 7". Subtracting a negative number is adding it.

    Args:
      expression: e.g. reasoning-gym chain_sum's metadata "expression", "15 - 43 + 7".

    Returns:
      The key, or None when `expression` is not such a chain (parentheses, division).

    Example:
      >>> chain_key("15 - 43 + 7"), chain_key("7 - 43 + 15"), chain_key("3 - 7")
      ('(+15 +7 -43)', '(+15 +7 -43)', '(+3 -7)')
    """
    tokens = expression.split()
    if len(tokens) % 2 == 0 or not all(_NUMBER.fullmatch(t) for t in tokens[::2]):
        return None
    if not all(op in ("+", "-", "*") for op in tokens[1::2]):
        return None
    # node: ("num", value) | ("sum", [(sign, node)]) | ("product", [node]); built left to right
    node: tuple = ("num", _number(tokens[0]))
    for op, token in zip(tokens[1::2], tokens[2::2], strict=True):
        value = _number(token)
        if op == "*":
            factors = node[1] if node[0] == "product" else [node]
            node = ("product", [*factors, ("num", value)])
        else:
            terms = node[1] if node[0] == "sum" else [_signed(1, node)]
            node = ("sum", [*terms, _signed(1 if op == "+" else -1, ("num", value))])
    return _spell_node(node)


def _signed(sign: int, node: tuple) -> tuple[int, tuple]:
    """(sign, node) with a negative number's sign moved out (a - -3 is a + 3) and 0 added."""
    if node[0] == "num" and node[1] <= 0:
        return (1 if node[1] == 0 else -sign), ("num", -node[1])
    return sign, node


def _spell_node(node: tuple) -> str:
    kind, body = node
    if kind == "num":
        return _spell(body)
    if kind == "product":
        return "(" + " * ".join(sorted(_spell_node(child) for child in body)) + ")"
    signed = sorted(("+" if sign > 0 else "-") + _spell_node(child) for sign, child in body)
    return "(" + " ".join(signed) + ")"


def _left_to_right(expression: str) -> Decimal | None:
    """The value of a + - * chain evaluated left to right, or None when it is not one."""
    tokens = expression.split()
    if len(tokens) % 2 == 0 or not all(_NUMBER.fullmatch(t) for t in tokens[::2]):
        return None
    total = Decimal(tokens[0])
    for op, token in zip(tokens[1::2], tokens[2::2], strict=True):
        if op not in ("+", "-", "*"):
            return None
        value = Decimal(token)
        total = total + value if op == "+" else total - value if op == "-" else total * value
    return total


def expression_key(entry: Mapping[str, Any]) -> str:
    """chain_sum, decimal_chain_sum, products: `chain_key` of the metadata's expression."""
    expression = entry["metadata"]["expression"]
    return chain_key(expression) or " ".join(expression.split())


def basic_arithmetic_key(entry: Mapping[str, Any]) -> str:
    """basic_arithmetic: `chain_key` where the answer is the left-to-right value (the generator
    without parentheses), else the expression's text (with parentheses: usual precedence)."""
    expression = entry["metadata"]["expression"]
    value = _left_to_right(expression)
    try:
        agrees = value is not None and value == Decimal(str(entry["answer"]).strip())
    except InvalidOperation:
        agrees = False
    key = chain_key(expression) if agrees else None
    return key or " ".join(expression.split())


def sorted_numbers_key(entry: Mapping[str, Any]) -> str:
    """gcd, lcm: the metadata's numbers, sorted (the operation is commutative).

    Example:
      >>> sorted_numbers_key({"metadata": {"numbers": [18, 12]}})
      '12 18'
    """
    return " ".join(str(n) for n in sorted(entry["metadata"]["numbers"]))


def number_key(entry: Mapping[str, Any]) -> str:
    """count_bits: the metadata's number."""
    return str(entry["metadata"]["number"])


def letter_counting_key(entry: Mapping[str, Any]) -> str:
    """letter_counting: the letter and the words, sorted and case-folded (the count of a letter
    in words, case-insensitive, is a sum over them)."""
    meta = entry["metadata"]
    words = sorted(word.casefold() for word in meta["span"])
    return f"{meta['target_letter'].casefold()}: {' '.join(words)}"


def equation_key(equation: str, variables: list[str]) -> str:
    """The key of a linear equation: variables renamed x0, x1, ... in order of first appearance,
    the left side's signed terms sorted, the right side kept.

    Args:
      equation: "lhs = rhs", terms separated by " + " / " - " (sympy's printing).
      variables: its variable names (one letter each for simple_equations).

    Example:
      >>> equation_key("1 - m = -4", ["m"]) == equation_key("-y + 1 = -4", ["y"])
      True
    """
    names = [v for v in variables if re.search(rf"\b{re.escape(v)}\b", equation)]
    names.sort(key=lambda v: re.search(rf"\b{re.escape(v)}\b", equation).start())
    for i, name in enumerate(names):
        equation = re.sub(rf"\b{re.escape(name)}\b", f"\0{i}", equation)
    equation = equation.replace("\0", "x")
    left, _, right = equation.partition("=")
    tokens = left.split()
    if len(tokens) % 2 == 0 or not all(op in _ADDITIVE for op in tokens[1::2]):
        return " ".join(equation.split())
    signed = []
    for op, term in zip(["+", *tokens[1::2]], tokens[::2], strict=True):
        sign = op
        if term.startswith("-"):
            sign, term = ("+" if op == "-" else "-"), term[1:]
        signed.append(sign + term)
    return " ".join(sorted(signed)) + " = " + " ".join(right.split())


def simple_equations_key(entry: Mapping[str, Any]) -> str:
    """simple_equations: `equation_key` of the metadata's equation and variable."""
    meta = entry["metadata"]
    return equation_key(meta["equation"], [meta["variable"]])


# reasoning-gym task (or preset) -> its key function; register_problem_key adds more.
_KEYS: dict[str, ProblemKey] = {
    "basic_arithmetic": basic_arithmetic_key,
    "chain_sum": expression_key,
    "count_bits": number_key,
    "decimal_chain_sum": expression_key,
    "gcd": sorted_numbers_key,
    "lcm": sorted_numbers_key,
    "letter_counting": letter_counting_key,
    "products": expression_key,
    "simple_equations": simple_equations_key,
}


def register_problem_key(task: str, fn: ProblemKey) -> ProblemKey:
    """Makes `fn` the key function of `task` (a reasoning-gym task or a preset name).

    Args:
      task: the name `problem_key_for` is asked with; a preset's own name wins over its task's.
      fn: entry (reasoning-gym's dict: question, answer, metadata) -> key. A module-level
        function, so that sources holding it pickle.

    Example:
      >>> def spell_backward_key(entry):
      ...     return entry["metadata"]["word"].casefold()
      >>> register_problem_key("spell_backward", spell_backward_key)
    """
    if not callable(fn):
        raise TypeError(f"register_problem_key({task!r}, ...): the key must be callable.")
    _KEYS[task] = fn
    return fn


def problem_key_for(task: str) -> ProblemKey | None:
    """The key function of `task` (a reasoning-gym task or a preset name), or None.

    Example:
      >>> problem_key_for("gcd")({"metadata": {"numbers": [18, 12]}})
      '12 18'
    """
    return _KEYS.get(task)
