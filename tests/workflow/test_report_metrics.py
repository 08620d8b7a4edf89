"""`report --metric`: a training-stream metric per group, on hand-made arrays and run directories."""

import json
import os
import re

import numpy as np
import pytest

from jaxrl_llm import report
from tests.workflow.test_report import make_run


def add_metric(run_dir, name, values):
    """Appends one metrics row per step 1..len(values) with `name` set."""
    with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
        for step, value in enumerate(values, start=1):
            f.write(json.dumps({"step": step, name: value, "completion/length": 30.0}) + "\n")


def test_metric_curve_keeps_the_steps_that_logged_it_and_the_last_row_of_a_step():
    rows = [{"step": 0, "eval/accuracy": 0.1}, {"step": 1, "m": 2.0}, {"step": 2, "m": 3.0},
            {"step": 2, "m": 4.0}, {"step": 3, "m": "text"}]  # fmt: skip
    assert report.metrics.metric_curve(rows, "m") == {1: 2.0, 2: 4.0}


def test_start_end_and_change_by_hand():
    # seed 0: 1 1 | 3 3 ; seed 1: 2 2 | 6 6 (window 2 over 4 steps)
    curves = [{1: 1.0, 2: 1.0, 3: 3.0, 4: 3.0}, {1: 2.0, 2: 2.0, 3: 6.0, 4: 6.0}]
    row = report.metrics.summarize_metric("g", curves, "m", window=2, num_resamples=500)
    assert row.start.mean == pytest.approx(1.5)
    assert row.end.mean == pytest.approx(4.5)
    assert row.change.mean == pytest.approx(3.0)
    assert row.seed_ends == [3.0, 6.0]
    # the interval resamples seeds: it spans the two seeds' ends, no wider
    assert row.end.low == pytest.approx(3.0) and row.end.high == pytest.approx(6.0)
    assert row.change.excludes_zero()
    assert row.curves == {1: [1.0, 2.0], 2: [1.0, 2.0], 3: [3.0, 6.0], 4: [3.0, 6.0]}


def test_the_peak_finds_a_rise_that_recedes_by_the_end():
    # steps 1..9: flat 4, a burst of 9 at steps 4-5, back to 4; window 2 -> peak 9 ending at 5
    curve = {s: 9.0 if s in (4, 5) else 4.0 for s in range(1, 10)}
    assert report.metrics.running_peak(curve, 2) == (pytest.approx(9.0), 5)
    assert report.metrics.running_peak(curve, 3) == (pytest.approx(22.0 / 3), 5)  # 4 9 9 or 9 9 4
    assert report.metrics.running_peak({3: 1.0, 7: 2.0}, 5) == (pytest.approx(1.5), 7)
    flat_ends = report.metrics.summarize_metric("g", [curve, curve], "m", window=2)
    assert flat_ends.seed_ends == [4.0, 4.0] and flat_ends.seed_peaks == [(9.0, 5), (9.0, 5)]


def test_a_run_shorter_than_the_window_uses_what_it_has_and_a_silent_seed_gives_none():
    row = report.metrics.summarize_metric("g", [{1: 1.0, 2: 3.0}], "m", window=5)
    assert row.start.mean == pytest.approx(2.0) and row.end.mean == pytest.approx(2.0)
    assert report.metrics.summarize_metric("g", [{1: 1.0}, {}], "m") is None
    with pytest.raises(ValueError, match="--metric_window=0"):
        report.metrics.summarize_metric("g", [{1: 1.0}], "m", window=0)


def test_difference_pairs_step_positions_and_refuses_other_widths():
    flat = [{s: 2.0 for s in range(1, 6)} for _ in range(3)]
    raised = [{s: 2.0 + (s > 3) * 4.0 for s in range(1, 6)} for _ in range(3)]
    base = report.metrics.summarize_metric("success", flat, "m", window=2)
    hack = report.metrics.summarize_metric("raw", raised, "m", window=2)
    diff = report.metrics.metric_difference(hack, base)
    assert diff.mean == pytest.approx(4.0) and diff.excludes_zero()
    short = report.metrics.summarize_metric("short", [{1: 1.0}], "m", window=2)
    with pytest.raises(ValueError, match="average 2 and 1 steps"):
        report.metrics.metric_difference(base, short)


def test_report_command_writes_the_metric_table_difference_and_curve(tmp_path, capsys):
    for seed in range(3):
        success = make_run(tmp_path / "success" / f"s{seed}", seed=seed, steps=10)
        add_metric(success, "reward/process_steps", [3.0 + 0.1 * seed] * 10)
        raw = make_run(tmp_path / "raw" / f"s{seed}", seed=seed, steps=10)
        add_metric(raw, "reward/process_steps", [3.0] * 5 + [6.0 + 0.1 * seed] * 5)
    out = tmp_path / "reports" / "prm"
    args = [
        f"success={tmp_path / 'success'}", f"raw={tmp_path / 'raw'}", "--against", "success",
        "--metric", "reward/process_steps", "--metric_window", "3", "--resamples", "300",
    ]  # fmt: skip
    assert report.main([*args, "--out", str(out) + "_md_only", "--no_plot"]) == 0
    assert sorted(os.listdir(out.parent)) == ["prm_md_only.md"]  # no PNG of accuracy or metric
    status = report.main([*args, "--out", str(out)])
    assert status == 0
    text = open(str(out) + ".md").read()
    rows = [line for line in text.splitlines() if line.startswith("| reward/process_steps |")]
    assert len(rows) == 2
    cells = {row.split(" | ")[1]: row.strip("| ").split(" | ") for row in rows}
    # metric, group, start, end, change, per-seed ends, per-seed peaks, end minus success
    assert cells["success"][2:6] == ["3.1 [3, 3.2]", "3.1 [3, 3.2]", "+0 [+0, +0] (includes 0)",
                                     "3 / 3.1 / 3.2"]  # fmt: skip
    assert cells["raw"][2:6] == ["3 [3, 3]", "6.1 [6, 6.2]", "+3.1 [+3, +3.2]", "6 / 6.1 / 6.2"]
    assert cells["raw"][6] == "6 (8) / 6.1 (8) / 6.2 (8)"  # first window all raised: steps 6-8
    assert len(cells["success"]) == 7  # no difference to itself
    mean, low, high = (float(x) for x in re.findall(r"[-+][\d.]+", cells["raw"][7]))
    assert mean == pytest.approx(3.0) and 2.8 <= low < 3.0 < high <= 3.2
    assert os.path.isfile(str(out) + "_reward_process_steps.png")
    md_only = open(str(out) + "_md_only.md").read()
    assert md_only.split("\n", 1)[1] == text.split("\n", 1)[1]  # the same but for the command


def test_a_metric_no_run_logged_is_one_error_naming_the_close_ones(tmp_path, capsys):
    run = make_run(tmp_path / "sweep" / "s0", seed=0)
    add_metric(run, "reward/process_steps", [3.0, 4.0])
    status = report.main([str(tmp_path / "sweep"), "--metric", "reward/process_step"])
    err = capsys.readouterr().err
    assert status == 2
    assert "reward/process_step" in err and "Close: reward/process_steps" in err


def test_a_group_whose_seeds_did_not_all_log_it_says_so(tmp_path):
    logged = make_run(tmp_path / "a" / "s0", seed=0)
    add_metric(logged, "m", [1.0, 2.0])
    make_run(tmp_path / "b" / "s0", seed=0, lr=1e-5)
    groups = report.collect_groups([str(tmp_path / "a"), str(tmp_path / "b")], log=lambda _: 0)
    text, by_name = report.metrics.metric_section(groups, ["m"], window=1, num_resamples=100)
    assert "not logged by every seed" in text
    assert [row.label for row in by_name["m"]] == [g.label for g in groups if g.runs[0].config[
        "optimizer.learning_rate"] == 3e-5]  # fmt: skip
    assert np.isclose(by_name["m"][0].end.mean, 2.0)
