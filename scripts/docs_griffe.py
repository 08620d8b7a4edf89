"""griffe extension for the documentation site: reads this library's docstring conventions.

Two Google-style habits of the source that griffe's parser reads otherwise:
- ``Example:`` opens an example (griffe knows only ``Examples:`` and would render ``>>>`` lines
  as prose, turning ``x[0]`` into a link);
- ``a, b: description`` in ``Args:`` documents several parameters at once (griffe would look for
  one parameter named ``a, b``); each name gets the description, so a name missing from the
  signature still warns.
Only the docstring text griffe renders changes; the source stays as it is. mkdocs.yml loads this
file through mkdocstrings' ``extensions`` option.
"""

from __future__ import annotations

import re

try:
    import griffe

    _Extension = griffe.Extension
except ImportError:  # the tests read `normalise_docstring` in a venv without the docs extra
    _Extension = object

__all__ = ["DocstringConventions", "normalise_docstring"]

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
_ARGS_TITLES = ("Args:", "Arguments:", "Parameters:", "Keyword Args:", "Keyword Arguments:")
_GROUPED_PARAM = re.compile(r"^(\s+)(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)+)\s*(\([^)]*\))?:(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _split_grouped_params(lines: list[str]) -> list[str]:
    """Rewrites ``a, b: text`` entries of Args sections as one entry per name."""
    out: list[str] = []
    section_indent = None  # the indent of the current Args title, or None outside one
    entry_indent = None  # the indent of that section's entries (its first line's)
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped in _ARGS_TITLES:
            section_indent, entry_indent = _indent(line), None
        elif stripped and section_indent is not None and _indent(line) <= section_indent:
            section_indent = None
        elif stripped and section_indent is not None and entry_indent is None:
            entry_indent = _indent(line)
        at_entry = section_indent is not None and stripped and _indent(line) == entry_indent
        match = _GROUPED_PARAM.match(line) if at_entry else None
        if not match:
            out.append(line)
            i += 1
            continue
        indent, names, kind, text = match.groups()
        block = [text]
        i += 1
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > entry_indent):
            block.append(lines[i])
            i += 1
        trailing = []  # blank lines after the entry stay after the last name's copy
        while len(block) > 1 and not block[-1].strip():
            trailing.insert(0, block.pop())
        for name in (n.strip() for n in names.split(",")):
            out.append(f"{indent}{name}{' ' + kind if kind else ''}:{block[0]}")
            out.extend(block[1:])
        out.extend(trailing)
    return out


def normalise_docstring(text: str) -> str:
    """The docstring as griffe's Google parser expects it (see the module docstring).

    Args:
      text: a docstring, dedented.

    Returns:
      The same text with ``Example:`` read as ``Examples:`` and grouped parameters split.

    Example:
      >>> normalise_docstring("Args:\\n  a, b: two ints.")
      'Args:\\n  a: two ints.\\n  b: two ints.'
    """
    text = _EXAMPLE.sub(r"\1Examples:", text)
    return "\n".join(_split_grouped_params(text.split("\n")))


class DocstringConventions(_Extension):
    """Normalises every docstring as it is loaded (``normalise_docstring``)."""

    def on_instance(self, *, obj, **kwargs) -> None:
        """Rewrites ``obj``'s docstring in place before anything parses it."""
        if obj.docstring is not None:
            obj.docstring.value = normalise_docstring(obj.docstring.value)
