"""Answer equality for numeric and free-form math answers (math-verify, then exact decimals).

math-verify (Hugging Face) parses LaTeX and plain expressions into SymPy and compares them. Its own
time limits use `signal.alarm`, which works only in the main thread: here they are used in the main
thread and switched off in any other thread, where the caller (e.g. `rewards.RewardRunner`, which
runs each reward in a worker thread with its own time limit) is responsible for stopping a slow call.
"""

from __future__ import annotations

import decimal
import logging
import re
import threading

import math_verify

__all__ = ["math_answer_score", "math_equal", "normalize_number", "parse_math", "verify_parsed"]

# math-verify's own limit per parse / comparison, in whole seconds (signal.alarm granularity).
_MAIN_THREAD_TIMEOUT_S = 5

_NUMBER_RE = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+")


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its timeout is off; off-main-thread callers own the limit."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())


def _timeout_s() -> int | None:
    return _MAIN_THREAD_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def normalize_number(text: str) -> decimal.Decimal | None:
    """The decimal value of a text that is one number, or None.

    Accepts a sign, thousands separators ("1,234"), decimals, a leading "$", a trailing "%" or
    period, and the Unicode minus sign.

    Example:
      >>> normalize_number("$1,234.50."), normalize_number("-4"), normalize_number("4 apples")
      (Decimal('1234.50'), Decimal('-4'), None)
    """
    t = text.strip().replace("\u2212", "-").removeprefix("$").rstrip(".%").strip()
    if not _NUMBER_RE.fullmatch(t):
        return None
    try:
        return decimal.Decimal(t.replace(",", ""))
    except decimal.InvalidOperation:
        return None


def parse_math(text: str) -> list:
    """math-verify's `parse` of `text`; a bare LaTeX answer (no $ delimiters) is retried in $...$.

    Returns:
      math-verify's list of parsed forms (SymPy object first, then the matched string); empty if
      nothing parsed.

    Example:
      >>> parse_math("\\frac{1}{2}")
      [1/2, '\\frac{1}{2}']
    """
    parsed = math_verify.parse(text, parsing_timeout=_timeout_s())
    if not parsed and "$" not in text:
        parsed = math_verify.parse(f"${text}$", parsing_timeout=_timeout_s())
    return parsed


def verify_parsed(gold: list, pred: list) -> bool:
    """math-verify's `verify(gold, pred)` of two `parse_math` results (gold first: it is asymmetric).

    Example:
      >>> verify_parsed(parse_math("\\frac{1}{2}"), parse_math("0.5"))
      True
    """
    return bool(math_verify.verify(gold, pred, timeout_seconds=_timeout_s()))


def math_equal(candidate: str, reference: str) -> bool:
    """Whether `candidate` states the same value as `reference`.

    First math-verify: both are parsed (LaTeX or plain expressions) and compared symbolically and
    numerically (6-digit float rounding, math-verify's default). If math-verify finds nothing equal,
    falls back to exact decimal equality of two plain numbers, so "1,000" equals "1000.0" even where
    parsing fails.

    Args:
      candidate: an extracted answer, e.g. "72" or "\\frac{1}{2}".
      reference: the reference answer.

    Example:
      >>> math_equal("1,234", "1234"), math_equal("0.5", "\\frac{1}{2}"), math_equal("-4", "4")
      (True, True, False)
    """
    if not candidate.strip() or not reference.strip():
        return False
    gold, pred = parse_math(reference), parse_math(candidate)
    if gold and pred and verify_parsed(gold, pred):
        return True
    a, b = normalize_number(candidate), normalize_number(reference)
    return a is not None and b is not None and a == b


def math_answer_score(candidate: str, reference: str) -> float:
    """1.0 if `math_equal(candidate, reference)`, else 0.0: the scorer of GSM8K-style examples.

    Example:
      >>> math_answer_score("18.00", "18"), math_answer_score("17", "18")
      (1.0, 0.0)
    """
    return 1.0 if math_equal(candidate, reference) else 0.0
