"""Every committed report regenerates from its kept records: rebuild each one and compare.

    python -m jaxrl_llm.report.check             # check docs/reports/*.md; exit 1 on a difference
    python -m jaxrl_llm.report.check --update    # rewrite each report that differs, with its PNGs

A report's header names the command that wrote it: `Generated DATE by `python -m jaxrl_llm.report
... --out docs/reports/NAME`.`, or that line's command in a fenced block below it (as
experiments/negative_results_report.py writes); the command reads the run records kept in the
repository (docs/reports/runs, `--keep_records`). The check reruns it in this process from
`--root`, with `--out` in a temporary directory, without `--keep_records` and without PNGs
(`NO_PLOT`), and compares the Markdown line by line, the date and the command left out: a
difference names the report and its first differing line (in a table, the row and the column).
`--update` reruns the command of each report that differs as written, rewriting the report and
its PNGs in place (one that matches keeps its date): after a change to the report code, one run
regenerates them all. A report whose records were not kept says so in its header, `Not
regenerable: <reason>.`, and is listed as "not regenerable: <reason>", not a failure.

Bad input fails the check with one line naming the report and the fix: a header without a
command, a command whose records (its positional arguments, `--start_from`, `--steps`) are
missing or whose `--out` is not the report, a regeneration that raises or exits non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "NOT_REGENERABLE",
    "NO_PLOT",
    "Outcome",
    "check_report",
    "check_reports",
    "first_difference",
    "header_command",
    "main",
    "record_paths",
]

# The header line of a report whose records were not kept: `Not regenerable: <reason>.`
NOT_REGENERABLE = "Not regenerable:"
# Options whose value is a record the command reads, besides its positional arguments.
RECORD_OPTIONS = ("--start_from", "--steps")
# Options of the report commands that write: the check moves --out and drops --keep_records.
_OUT, _KEEP = "--out", "--keep_records"
# Per program, the options that leave its PNGs out: the check compares the Markdown only.
NO_PLOT = {"jaxrl_llm.report": ("--no_plot",)}
_GENERATED = re.compile(r"^Generated (\d{4}-\d{2}-\d{2}) by", re.M)
_COMMAND = re.compile(r"^Generated \S+ by\s+(?:`([^`]+)`|```\n(.+?)\n```)", re.M | re.S)
_FIX = f"or add a line '{NOT_REGENERABLE} <why>.' to its header"


class Outcome(NamedTuple):
    """What the check found for one report.

    Attributes:
      name: the report's file name (`main_job.md`).
      status: "ok", "updated", "differs", "not regenerable" or "error" (bad input).
      message: one line: the first difference, the reason it is not regenerable, or the fix.
    """

    name: str
    status: str
    message: str = ""

    @property
    def failed(self) -> bool:
        """Whether the report fails the check (a difference or bad input)."""
        return self.status in ("differs", "error")


class _BadReport(Exception):
    """One line naming what is wrong with a report and its fix."""


def header_command(text: str) -> tuple[str, list[str]] | None:
    """(program, arguments) of the command in a report's header, or None when it names none.

    The program is the module of `python -m MODULE` or the script of `python SCRIPT.py`:
      >>> header_command("Generated 2026-12-01 by `python -m jaxrl_llm.report runs/a --out r`.")
      ('jaxrl_llm.report', ['runs/a', '--out', 'r'])
    """
    match = _COMMAND.search(text)
    if not match:
        return None
    words = shlex.split(match.group(1) or match.group(2))
    if words[:2] == ["python", "-m"] and len(words) > 2:
        return words[2], words[3:]
    if words[:1] == ["python"] and len(words) > 1 and words[1].endswith(".py"):
        return words[1], words[2:]
    return None


def _pop_option(args: Sequence[str], name: str) -> tuple[str | None, list[str]]:
    """(the value of `--name VALUE` or `--name=VALUE`, the last given; `args` without it)."""
    value, rest, words = None, [], iter(args)
    for word in words:
        if word == name:
            value = next(words, None)
        elif word.startswith(name + "="):
            value = word.split("=", 1)[1]
        else:
            rest.append(word)
    return value, rest


def record_paths(args: Sequence[str]) -> list[str]:
    """The records a report command reads: its positional arguments (`DIR` or
    `LABEL=DIR[,DIR...]`) and the values of `RECORD_OPTIONS`. Every option of the report commands
    takes a value, so a word after an option is that option's value."""
    paths, words = [], iter(args)
    for word in words:
        name, sep, value = word.partition("=")
        if word.startswith("--"):
            value = value if sep else next(words, "")
            paths += [value] if name in RECORD_OPTIONS else []
        else:  # a directory, or LABEL=DIR,DIR (a directory's name may hold "=")
            dirs = value if sep and not os.path.exists(word) else word
            paths += [d for d in dirs.split(",") if d]
    return paths


def _tool_main(program: str):
    """The `main(argv)` of `python -m MODULE` or of `python SCRIPT.py` (a path from the root)."""
    if not program.endswith(".py"):
        return importlib.import_module(program).main
    name = os.path.splitext(os.path.basename(program))[0]
    spec = importlib.util.spec_from_file_location(f"_report_check_{name}", program)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _regenerate(program: str, args: Sequence[str]) -> None:
    """Runs a report command in this process (from the current directory), output captured.

    Raises:
      _BadReport: it raised or exited non-zero (its last line of output in the message).
    """
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            status = _tool_main(program)(list(args))
    except SystemExit as e:  # argparse refuses the arguments
        status = e.code
    except Exception as e:  # noqa: BLE001  # any failure of the command is the report's to name
        raise _BadReport(f"regenerating it raised {type(e).__name__}: {e}") from e
    if status not in (None, 0):
        last = (output.getvalue().strip().splitlines() or [""])[-1]
        raise _BadReport(f"regenerating it exited {status}: {last}")


def _normalised(text: str) -> list[str]:
    """The report's lines with its date and command replaced by placeholders."""
    match = _COMMAND.search(text)
    if match:
        command = match.group(1) or match.group(2)
        text = text.replace(command, "COMMAND")
    return _GENERATED.sub("Generated DATE by", text, count=1).splitlines()


def _excerpt(line: str, start: int, width: int = 160) -> str:
    """`width` characters of `line` from `start`, cuts marked with '...'."""
    text = line[start : start + width]
    return ("..." if start else "") + text + ("..." if start + width < len(line) else "")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def _cell_difference(header: str, a: str, b: str) -> str | None:
    """The first differing cell of two rows of one table (None if their columns differ)."""
    names, cells_a, cells_b = _cells(header), _cells(a), _cells(b)
    if not len(cells_a) == len(cells_b) == len(names):
        return None
    for name, x, y in zip(names, cells_a, cells_b, strict=True):
        if x != y:
            return f"row {cells_a[0]!r}, column {name!r}: committed {x!r}, regenerated {y!r}"
    return None


def first_difference(committed: str, regenerated: str) -> str | None:
    """The first line where two reports differ (date and command left out), or None.

    In a table row it names the row's first cell and the column; otherwise the line number.
      >>> table = "| group | after % |\\n| --- | --- |\\n| GRPO | {} |\\n"
      >>> first_difference(table.format("28.8"), table.format("28.9"))
      "row 'GRPO', column 'after %': committed '28.8', regenerated '28.9'"
    """
    old, new = _normalised(committed), _normalised(regenerated)
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else "<end of file>"
        b = new[i] if i < len(new) else "<end of file>"
        if a == b:
            continue
        last = min(i, len(old) - 1)
        header = next((old[j - 1] for j in range(last, 0, -1) if old[j].startswith("| ---")), None)
        in_table = header is not None and a.startswith("|") and b.startswith("|")
        cell = _cell_difference(header, a, b) if in_table else None
        if cell:
            return cell
        start = max(len(os.path.commonprefix([a, b])) - 40, 0)
        return f"line {i + 1}: committed {_excerpt(a, start)!r}, regenerated {_excerpt(b, start)!r}"
    return None


def _not_regenerable(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("|"):  # the header ends at the first table
            return None
        if line.startswith(NOT_REGENERABLE):
            return line[len(NOT_REGENERABLE) :].strip().rstrip(".")
    return None


def _command_of(path: str, text: str) -> tuple[str, list[str], str]:
    """(program, arguments less --out and --keep_records, --out) of a report's command.

    Raises:
      _BadReport: no command, records missing, or an --out that is not the report.
    """
    command = header_command(text)
    if command is None:
        raise _BadReport(
            "its header names no command (a first line 'Generated DATE by `python -m "
            "jaxrl_llm.report ... --out docs/reports/NAME`.'); regenerate it with the report "
            f"command, {_FIX}"
        )
    program, args = command
    missing = [p for p in record_paths(args) if not os.path.exists(p)]
    if missing:
        raise _BadReport(
            f"its command names records that are missing: {', '.join(missing)}; keep them "
            "(`--keep_records docs/reports/runs`) and point the command at the kept copy, " + _FIX
        )
    out, rest = _pop_option(_pop_option(args, _KEEP)[1], _OUT)
    written = (out or "") + ("" if (out or "").endswith(".md") else ".md")
    if out is None or os.path.abspath(written) != os.path.abspath(path):
        raise _BadReport(
            f"its command writes {written if out else 'no file (no --out)'}, not this report; "
            f"give it --out {os.path.splitext(path)[0]}"
        )
    return program, rest, out


def check_report(path: str, *, update: bool = False) -> Outcome:
    """Regenerates one report (a path from the current directory) and compares it.

    Args:
      path: the report's Markdown file.
      update: rerun its command with its own --out when it differs (the report and its PNGs).

    Returns:
      The `Outcome`.
    """
    name = os.path.basename(path)
    with open(path) as f:
        committed = f.read()
    reason = _not_regenerable(committed)
    if reason is not None:
        return Outcome(name, "not regenerable", reason)
    try:
        program, args, out = _command_of(path, committed)
        with tempfile.TemporaryDirectory() as tmp:
            tmp_out = os.path.join(tmp, os.path.basename(out))
            _regenerate(program, [*args, _OUT, tmp_out, *NO_PLOT.get(program, ())])
            with open(os.path.join(tmp, name)) as f:
                difference = first_difference(committed, f.read())
        if difference is None:
            return Outcome(name, "ok")
        if not update:
            return Outcome(name, "differs", difference)
        _regenerate(program, [*args, _OUT, out])
        return Outcome(name, "updated", difference)
    except _BadReport as e:
        return Outcome(name, "error", f"{e}")


def check_reports(reports_dir: str = "docs/reports", *, update: bool = False) -> list[Outcome]:
    """`check_report` of every `*.md` directly in `reports_dir`, in name order."""
    names = sorted(n for n in os.listdir(reports_dir) if n.endswith(".md"))
    return [check_report(os.path.join(reports_dir, n), update=update) for n in names]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring): one line per report; exit 1 when any fails."""
    parser = argparse.ArgumentParser(
        prog="python -m jaxrl_llm.report.check", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--root", default=".", help="the repository the commands run from")
    parser.add_argument("--reports", default="docs/reports", help="the reports, from --root")
    parser.add_argument(
        "--update", action="store_true", help="rewrite each report that differs from its command"
    )
    args = parser.parse_args(argv)
    with contextlib.chdir(args.root):
        outcomes = check_reports(args.reports, update=args.update)
    for outcome in outcomes:
        detail = f": {outcome.message}" if outcome.message else ""
        print(f"{outcome.name}: {outcome.status}{detail}")
    failed = [o.name for o in outcomes if o.failed]
    print(
        f"[report.check] {len(outcomes)} reports, "
        + (f"{len(failed)} failed: {', '.join(failed)}" if failed else "none failed")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
