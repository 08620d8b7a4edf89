"""`python -m jaxrl_llm.report.check`: every committed report regenerates from its kept records,
and a difference, a missing command or missing records fail it in one line naming the report."""

import json
import os
import shutil

import pytest

from jaxrl_llm import report
from jaxrl_llm.report import check
from tests.workflow.test_report import make_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_committed_report_regenerates(monkeypatch, capsys):
    """The CI guard: each report under docs/reports matches its command's output (about 8 s)."""
    monkeypatch.chdir(ROOT)
    outcomes = check.check_reports("docs/reports")
    names = sorted(n for n in os.listdir("docs/reports") if n.endswith(".md"))
    assert [o.name for o in outcomes] == names and len(names) >= 12
    failed = [f"{o.name}: {o.status}: {o.message}" for o in outcomes if o.failed]
    assert not failed, "\n".join(failed) + "\n(python -m jaxrl_llm.report.check --update)"
    assert {o.status for o in outcomes} <= {"ok", "not regenerable"}


def _copy_of_lora(tmp_path):
    """tmp_path as a repository holding docs/reports/lora.md and the kept records (a link)."""
    reports = tmp_path / "docs" / "reports"
    reports.mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "docs/reports/lora.md"), reports / "lora.md")
    os.symlink(os.path.join(ROOT, "docs/reports/runs"), reports / "runs")
    return reports / "lora.md"


def test_an_edited_cell_fails_naming_the_report_row_and_column(tmp_path, monkeypatch, capsys):
    path = _copy_of_lora(tmp_path)
    monkeypatch.chdir(tmp_path)
    text = path.read_text()
    path.write_text(text.replace("Generated 2026-", "Generated 2020-", 1))  # the date may differ
    assert check.check_report("docs/reports/lora.md") == ("lora.md", "ok", "")
    row = "| LoRA rank 16 | 0,1,2 | 9.0 [5.5, 13.0] | 28.5 [21.5, 35.7] |"
    assert row in text
    path.write_text(text.replace(row, row.replace("28.5 [", "28.6 [")))
    assert check.main([]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [
        "lora.md: differs: row 'LoRA rank 16', column 'after %': committed '28.6 [21.5, 35.7]', "
        "regenerated '28.5 [21.5, 35.7]'",
        "[report.check] 1 reports, 1 failed: lora.md",
    ]
    assert sorted(os.listdir(path.parent)) == ["lora.md", "runs"]  # the check wrote nothing
    assert check.main(["--update"]) == 0  # rewritten from its command, PNG too
    assert row in path.read_text() and (path.parent / "lora.png").is_file()
    assert check.check_report("docs/reports/lora.md").status == "ok"


def test_a_changed_sentence_names_its_line(tmp_path, monkeypatch):
    path = _copy_of_lora(tmp_path)
    monkeypatch.chdir(tmp_path)
    text = path.read_text()
    path.write_text(text.replace("is not a win.", "is a win.", 1))
    outcome = check.check_report("docs/reports/lora.md")
    assert outcome.status == "differs" and outcome.message.startswith("line 10: committed '...")
    assert "interval includes 0 is a win.'" in outcome.message
    assert "interval includes 0 is not a win.'" in outcome.message


@pytest.fixture
def tiny_repo(tmp_path, monkeypatch):
    """tmp_path as a repository with one kept run and its report, docs/reports/tiny.md."""
    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "docs/reports/runs/tiny/000_seed=0", seed=0, questions=20)
    argv = ["docs/reports/runs/tiny", "--resamples", "50", "--out", "docs/reports/tiny"]
    assert report.main(argv) == 0
    return tmp_path / "docs" / "reports"


def _write(path, text):
    path.write_text(text)
    return check.check_report(str(path.relative_to(os.getcwd())))


def test_hand_made_reports_are_checked_and_bad_ones_named(tiny_repo, capsys):
    assert check.check_report("docs/reports/tiny.md") == ("tiny.md", "ok", "")
    command = "Generated 2026-12-01 by `python -m jaxrl_llm.report {} --out docs/reports/{}`.\n"

    bare = _write(tiny_repo / "bare.md", "| group | after % |\n| --- | --- |\n| a | 1 |\n")
    assert bare.status == "error" and bare.message.startswith("its header names no command")
    assert "Not regenerable: <why>." in bare.message

    gone = _write(tiny_repo / "gone.md", command.format("a=docs/reports/runs/gone,x", "gone"))
    assert gone.status == "error" and gone.message.startswith(
        "its command names records that are missing: docs/reports/runs/gone, x; keep them"
    )

    other = _write(tiny_repo / "other.md", command.format("docs/reports/runs/tiny", "tiny"))
    assert other.status == "error"
    assert other.message == (
        "its command writes docs/reports/tiny.md, not this report; give it --out docs/reports/other"
    )

    broken_run = tiny_repo / "runs" / "broken" / "000_seed=0"
    make_run(broken_run, seed=0, questions=20)
    (broken_run / "config.json").write_text(json.dumps([1]))  # not a config: load_run raises
    broken = _write(tiny_repo / "broken.md", command.format("docs/reports/runs/broken", "broken"))
    assert broken.status == "error" and broken.message == (
        "regenerating it raised AttributeError: 'list' object has no attribute 'items'"
    )

    (broken_run / "config.json").write_text('{"seed": 0, "task": {"name": "chain_sum"}}')
    (broken_run / "summary.json").unlink()  # the run looks unfinished: the report exits 2
    broken = _write(tiny_repo / "broken.md", command.format(broken_run, "broken"))
    assert broken.status == "error" and broken.message.startswith(
        f"regenerating it exited 2: error: report: {broken_run} has no summary.json"
    )

    kept_not = "Generated 2026-11-01 by hand.\nNot regenerable: the runs were deleted.\n\n| a |\n"
    assert _write(tiny_repo / "old.md", kept_not) == (
        "old.md", "not regenerable", "the runs were deleted"
    )  # fmt: skip

    assert check.main([]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "old.md: not regenerable: the runs were deleted" in out and "tiny.md: ok" in out
    assert out[-1] == "[report.check] 6 reports, 4 failed: bare.md, broken.md, gone.md, other.md"


def test_header_command_and_record_paths():
    fenced = "Generated 2026-12-04 by\n\n```\npython experiments/x.py --steps s 'a b=d'\n```\n"
    assert check.header_command(fenced) == ("experiments/x.py", ["--steps", "s", "a b=d"])
    assert check.header_command("Generated 2026-12-04 by `ls -l`.") is None
    args = ["a=x,y", "b", "--against", "a", "--start_from", "s", "--metric",
            "reward/process_steps", "--out", "o", "--steps=t"]  # fmt: skip
    assert check.record_paths(args) == ["x", "y", "b", "s", "t"]
