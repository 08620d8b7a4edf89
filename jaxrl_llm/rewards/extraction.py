"""Pulling the final answer out of a completion: its last number, its last stated number, or a
tagged span."""

from __future__ import annotations

import re

from jaxrl_llm.data.scoring import normalize_number

__all__ = [
    "extract_last_number",
    "extract_stated_number",
    "extract_tagged_answer",
    "find_numbers",
    "number_key",
    "stated_numbers",
]

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

# An answer marker right before a number states it as a result: "=", one of the words below, or
# "answer" / "result" with a colon; then only spaces, colons, asterisks (Markdown bold) and a
# dollar sign before the number. Matched against the text just before the number.
_MARKER_BEFORE = re.compile(
    r"(?:=|\b(?:is|are|was|be|equals|equal to|makes|gives)|\b(?:answer|result)\s*:)"
    r"[\s:*]*\$?$",
    re.IGNORECASE,
)
# How far back from a number its marker may start (the longest marker plus its padding).
_MARKER_WINDOW = 24
# An operator and a further operand right after a number: the number does not end its expression
# ("= 15 - 43" states no result), so it is not stated.
_CONTINUES = re.compile(r"\s*[-+*/\u00d7\u00f7^]\s*[\d(.]")


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


def number_key(text: str) -> str | None:
    """The canonical value of a text that is one number, for comparing numbers by value: no
    exponent, no trailing zeros, "-0" as "0"; None when the text is not one number.

    Example:
      >>> number_key("2.50"), number_key("1,000"), number_key("-0"), number_key("two")
      ('2.5', '1000', '0', None)
    """
    value = normalize_number(text)
    if value is None or not value.is_finite():
        return None
    return "0" if value == 0 else format(value.normalize(), "f")


def stated_numbers(text: str) -> list[str]:
    """The numbers of `text` stated as a result, in order, normalised as in `find_numbers`.

    A number is stated when an answer marker comes right before it (`=`, `is`, `are`, `was`, `be`,
    `equals`, `equal to`, `makes`, `gives` as whole words, or `answer:` / `result:`; any case;
    only spaces, `:`, `*` and `$` in between) and it ends its expression (no operator with a
    further operand right after it: "= 15 - 43" states nothing).

    Example:
      >>> stated_numbers("12 = 2 * 6, so the GCD is 6, since 6 divides 12.")
      ['6']
      >>> stated_numbers("The LCM(2, 4) is the smallest multiple of")
      []
    """
    text = text.replace("\u2212", "-")
    out = []
    for m in _NUMBER.finditer(text):
        before = text[max(0, m.start() - _MARKER_WINDOW) : m.start()]
        if _MARKER_BEFORE.search(before) and not _CONTINUES.match(text, m.end()):
            out.append(m.group(0).replace(",", ""))
    return out


def extract_stated_number(text: str, question: str = "") -> str | None:
    """The number a completion gives as its answer, never an unstated copy of a question number.

    The rule, in order:
      1. the last number, if its value is none of `question`'s numbers (a number the completion
         wrote, not copied) or the whole stripped text is that one number ("54", "54.");
      2. else the last stated number (`stated_numbers`; the last number itself when a marker states
         it: "The GCD of 6 and 12 is 6.");
      3. else None: the completion ends on a question number it does not state as the answer
         (the lcm hack of docs/recipe.md, "... The LCM(2, 4) is the smallest multiple of").

    Args:
      text: the completion.
      question: the question it answers (its numbers are the ones a completion may copy); "" means
        none, and the rule is then the last number.

    Example:
      >>> extract_stated_number("The GCD of 12 and 18 is 6, since 6 divides 12 and 18.", "12, 18")
      '6'
      >>> extract_stated_number("LCM(2, 4)\nThe LCM(2, 4) is the smallest multiple of", "2, 4") is None
      True
      >>> extract_stated_number("54", "6 * 9"), extract_stated_number("6 * 9 = 54.", "6 * 9")
      ('54', '54')
    """
    numbers = find_numbers(text)
    if not numbers:
        return None
    last = numbers[-1]
    copied = {number_key(n) for n in find_numbers(question)}
    if number_key(last) not in copied or number_key(text) is not None:
        return last
    stated = stated_numbers(text)
    return stated[-1] if stated else None


def extract_tagged_answer(text: str, tag: str = "answer") -> str | None:
    """The stripped content of the last `<tag>...</tag>` span in `text`, or None.

    Example:
      >>> extract_tagged_answer("<think>2+2</think><answer> 4 </answer>")
      '4'
    """
    pattern = re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)
    matches = pattern.findall(text)
    return matches[-1].strip() if matches else None
