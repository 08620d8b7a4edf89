"""The command lines explain themselves: every option has a help text, and no text in the
package (code, comments, docstrings, help, messages) cites a tracker's issue number, which a
reader cannot look up; it says what the number stood for instead."""

import argparse
import ast
import pathlib
import re

import pytest

import jaxrl_llm
from jaxrl_llm.launch import cli as launch_cli
from jaxrl_llm.report import cli as report_cli

PACKAGE = pathlib.Path(jaxrl_llm.__file__).parent
# "issue 42", "Issue 42's rule", "issue\n    42" (wrapped), "#42"; a URL (.../issues/42) is a
# reference a reader can follow and is not matched.
ISSUE_NUMBER = re.compile(r"\bissue\s+#?\d|(?<![\w/&])#\d{2,}", re.IGNORECASE)


def test_the_issue_pattern_catches_the_forms_it_should():
    found = [bool(ISSUE_NUMBER.search(text)) for text in (
        "issue 42's rule", "(Issue\n    42)", "see #76", "TRL #5224",
        "https://github.com/huggingface/trl/issues/5224", "an issue with 3 seeds",
        "color: #fff", "&#39;",
    )]  # fmt: skip
    assert found == [True, True, True, True, False, False, False, False]


def _issue_numbers(paths) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)}:{text.count(chr(10), 0, match.start()) + 1}: "
        f"{match.group(0)!r}"
        for path in sorted(paths)
        for text in [path.read_text()]
        for match in ISSUE_NUMBER.finditer(text)
    ]


def test_no_issue_number_in_the_package():
    assert _issue_numbers(PACKAGE.rglob("*.py")) == []


def test_no_issue_number_in_the_user_docs_notebooks_and_experiment_files():
    """The guides, the README, the notebooks and the configs and sweeps users copy; the dated
    reports under docs/reports/ may name what they measured."""
    root = PACKAGE.parent
    paths = [
        root / "README.md",
        *(root / "docs").glob("*.md"),
        *(root / "notebooks").glob("*.ipynb"),
        *(root / "experiments" / "configs").glob("*.py"),
        *(root / "experiments" / "sweeps").glob("*.py"),
    ]
    assert len(paths) > 40
    assert _issue_numbers(paths) == []


@pytest.mark.parametrize("module", [launch_cli, report_cli], ids=["launch", "report"])
def test_every_argparse_option_has_help_that_names_no_issue(module):
    parser = module.build_parser()
    options = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    assert len(options) >= 10
    missing = [a.dest for a in options if not (a.help or "").strip()]
    assert missing == []
    texts = [parser.description, *(a.help for a in options)]
    assert [t for t in texts if ISSUE_NUMBER.search(t)] == []
    # the description is the docstring's whole first sentence, not its first line
    assert parser.description.endswith(".")


def _absl_flag_helps() -> dict[str, str]:
    """{"file:flag": help} of every absl flag the package defines (read from the source, so the
    command lines' modules are not imported into one process, where their flags would clash)."""
    helps = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = node.func if isinstance(node, ast.Call) else None
            name = getattr(func, "attr", "")
            if not name.startswith("DEFINE_"):
                continue
            args = {i: arg for i, arg in enumerate(node.args)}
            args.update({kw.arg: kw.value for kw in node.keywords})
            flag, help_node = args.get(0, args.get("name")), args.get(2, args.get("help"))
            helps[f"{path.name}:{ast.literal_eval(flag)}"] = (
                ast.literal_eval(help_node) if help_node is not None else ""
            )
    return helps


def test_every_absl_flag_has_help_that_names_no_issue():
    helps = _absl_flag_helps()
    assert {"main.py:config", "main.py:workdir", "evaluate.py:workdir", "plan.py:topology"} <= set(
        helps
    )
    assert [flag for flag, text in helps.items() if not text.strip()] == []
    assert [flag for flag, text in helps.items() if ISSUE_NUMBER.search(text)] == []
