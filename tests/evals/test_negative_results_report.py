"""experiments/negative_results_report.py on hand-made records: Math-Shepherd labels split by the
sign of each step's result, and negative answers and accuracy split by the reference's sign."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "experiments", "negative_results_report.py")

_spec = importlib.util.spec_from_file_location("negative_results_report", SCRIPT)
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def _write_jsonl(path, records):
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def test_labels_split_by_the_sign_of_each_steps_result(tmp_path):
    steps = tmp_path / "steps.jsonl"
    _write_jsonl(
        steps,
        [
            # steps: 3 - 5 = -2 (label 0), -2 + 4 = 2 (1), answer 2 (1)
            {"completion": "3 - 5 = -2\n-2 + 4 = 2\nThe answer is 2.", "labels": [0.0, 1.0, 1.0]},
            # steps: 1 - 9 = -8 (0.5), answer -8 (0.25)
            {"completion": "1 - 9 = -8\n\nThe answer is -8.", "labels": [0.5, 0.25]},
        ],
    )
    neg_mean, pos_mean, neg_n, pos_n, diff = report.label_by_sign(str(steps))
    assert (neg_n, pos_n) == (3, 2)
    assert neg_mean == pytest.approx(0.25)  # (0 + 0.5 + 0.25) / 3
    assert pos_mean == pytest.approx(1.0)
    assert diff.mean == pytest.approx(-0.75)
    assert diff.low <= diff.mean <= diff.high


def test_labels_that_do_not_match_the_steps_are_refused(tmp_path):
    steps = tmp_path / "steps.jsonl"
    _write_jsonl(steps, [{"completion": "1 + 1 = 2\nThe answer is 2.", "labels": [1.0]}])
    with pytest.raises(ValueError, match="2 steps and 1 labels"):
        report.label_by_sign(str(steps))


def test_group_rows_split_accuracy_by_the_references_sign(tmp_path):
    references = ["-3", "4", "-1", "5"]
    dirs = []
    for seed, last_answers in enumerate([["3", "4", "1", "5"], ["3", "4", "-1", "6"]]):
        trial = tmp_path / f"seed{seed}"
        trial.mkdir()
        evals = [
            {"step": 0, "set": "held_out", "references": references, "answers": references,
             "correct": [True] * 4},
            {"step": 30, "set": "held_out", "references": references, "answers": last_answers,
             "correct": [a == r for a, r in zip(last_answers, references, strict=True)]},
        ]  # fmt: skip
        _write_jsonl(trial / "eval_questions.jsonl", evals[::-1])  # any order on disk
        dirs.append(str(trial))
    first, last = report.group_rows("arm", dirs)
    # first: half the answers negative, all right
    assert first.startswith("| arm | first (step 0, 0) | 50.0 [") and first.count("100.0") >= 4
    # last: 1 negative answer of 8; negative references 1 of 4 right, the others 3 of 4
    cells = [c.strip() for c in last.strip("|").split("|")]
    assert cells[1] == "last (step 30, 30)"
    assert cells[2].startswith("12.5 [")
    assert cells[3].startswith("25.0 [")
    assert cells[4].startswith("75.0 [")


def test_out_writes_the_tables_under_the_command_that_made_them(tmp_path, capsys):
    steps = tmp_path / "steps.jsonl"
    _write_jsonl(steps, [{"completion": "3 - 5 = -2\nThe answer is -2.", "labels": [0.0, 0.5]}])
    trial = tmp_path / "seed0"
    trial.mkdir()
    evals = [
        {
            "step": s,
            "set": "held_out",
            "references": ["-2", "3"],
            "answers": ["-2", "3"],
            "correct": [True, True],
        }
        for s in (0, 30)
    ]
    _write_jsonl(trial / "eval_questions.jsonl", evals)
    argv = ["--steps", str(steps), f"arm={trial}"]
    report.main(argv)
    printed = capsys.readouterr().out.splitlines()
    out = tmp_path / "table.md"
    report.main([*argv, "--out", str(out)])
    written = out.read_text().splitlines()
    assert written[0].startswith("Generated ") and written[0].endswith(" by")
    assert written[3] == "python experiments/negative_results_report.py " + " ".join(
        [*argv, "--out", str(out)]
    )
    assert written[6] == report.WHY
    assert written[8:] == printed  # the same tables as without --out
    assert written[-1].startswith("| arm | last (step 30) | 50.0 [")  # 1 of 2 answers negative
