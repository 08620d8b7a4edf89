"""Pulling the final answer out of a completion: its last number, or a tagged span."""

from __future__ import annotations

import re

__all__ = ["extract_last_number", "extract_tagged_answer", "find_numbers"]

# A number: optional minus sign (only where it cannot be a binary minus, i.e. not right after a
# word character or a closing bracket), then either digits with comma thousands separators or
# plain digits, then an optional decimal part; or a bare decimal part ".5". The look-behind keeps
# "1.2.3" from yielding ".3" and the look-ahead keeps "12,3456" from yielding "12,345" (it gives
# "12" and "3456").
_NUMBER = re.compile(
    r"(?:(?<![\w)\]])-)?"
    r"(?<![\d.])"
    r"(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
    r"(?!\d)"
)


def find_numbers(text: str) -> list[str]:
    """Every number in `text`, in order, normalised: no thousands separators, ASCII minus.

    Example:
      >>> find_numbers("Take 1,234 apples, eat -5.5 and 3.")
      ['1234', '-5.5', '3']
    """
    text = text.replace("\u2212", "-")  # Unicode minus sign
    return [m.group(0).replace(",", "") for m in _NUMBER.finditer(text)]


def extract_last_number(text: str) -> str | None:
    """The last number in `text`, normalised, or None.

    Handles negatives ("-4"; but "5-3" gives "3": a minus right after a digit or a letter is
    subtraction), decimals ("3.50" stays "3.50"), thousands separators ("1,234" -> "1234") and a
    trailing period ("is 42." -> "42"). Comma-separated lists keep their items apart
    ("1, 2, 3" -> "3"; "12,3456" -> "3456").

    Example:
      >>> extract_last_number("So 3 + 4 = 7, minus 11 gives -4.")
      '-4'
      >>> extract_last_number("Total: $1,234.50.")
      '1234.50'
      >>> extract_last_number("no digits") is None
      True
    """
    numbers = find_numbers(text)
    return numbers[-1] if numbers else None


def extract_tagged_answer(text: str, tag: str = "answer") -> str | None:
    """The stripped content of the last `<tag>...</tag>` span in `text`, or None.

    Example:
      >>> extract_tagged_answer("<think>2+2</think><answer> 4 </answer>")
      '4'
    """
    pattern = re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)
    matches = pattern.findall(text)
    return matches[-1].strip() if matches else None
