"""The CI check of the research workflow: a 2-trial sweep of the tiny config through the launcher's
command line (two trials at once), then the plot command on the sweep directory. The summary table
and the PNGs must hold the trials' own numbers (the last values in their metrics.jsonl)."""

import csv
import json
import os
import subprocess
import sys

from matplotlib import image as mpimg

from jaxrl_llm.launch.sweep import SUMMARY_METRICS
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.plots import png_curves

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _final(workdir):
    final = {}
    for row in read_metrics(workdir):
        final.update(row)
    return final


def test_two_trial_sweep_writes_a_summary_table_and_plots(tmp_path):
    sweep_dir = tmp_path / "sweep"
    cmd = [
        sys.executable, "-m", "jaxrl_llm.launch",
        "--config", "experiments/configs/grpo_tiny.py",
        "--sweep", "experiments/sweeps/tiny_estimators.py",
        "--sweep_dir", str(sweep_dir), "--parallel", "2",
        "--set", "train.num_steps=2", "--set", "train.checkpoint_every=2",
        "--gin_bindings", "rewards.timeout_s = 3.0",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    logs = "".join(open(p).read() for p in sweep_dir.glob("*/log.txt"))
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs

    plan = json.load(open(sweep_dir / "sweep.json"))
    names = [t["name"] for t in plan["trials"]]
    assert names == ["000_advantage=grpo_seed=0", "001_advantage=rloo_seed=1"]
    for trial in plan["trials"]:
        assert "--config.loss.advantage=" + trial["overrides"]["loss.advantage"] in trial["command"]
        gin_text = open(os.path.join(trial["workdir"], "config.gin")).read()
        assert "rewards.timeout_s = 3.0" in gin_text
        assert json.load(open(os.path.join(trial["workdir"], "summary.json")))["steps"] == 2

    rows = list(csv.DictReader(open(sweep_dir / "summary.csv")))
    assert [r["trial"] for r in rows] == names
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert [r["loss.advantage"] for r in rows] == ["grpo", "rloo"]
    finals = [_final(t["workdir"]) for t in plan["trials"]]
    for row, final in zip(rows, finals, strict=True):
        assert row["step"] == "2"
        columns = [m for m in SUMMARY_METRICS if m in final]
        assert {"reward/mean", "reward/accuracy", "eval/accuracy", "train/entropy"} <= set(columns)
        for metric in columns:
            assert float(row[metric]) == final[metric], metric  # exact, not rounded
    assert finals[0]["train/entropy"] != finals[1]["train/entropy"]  # two different trials
    markdown = open(sweep_dir / "summary.md").read()
    assert all(f"| {name} | ok |" in markdown for name in names)

    out = tmp_path / "plots"
    proc = subprocess.run(
        [sys.executable, "-m", "jaxrl_llm.plots", str(sweep_dir), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    stems = ["reward", "accuracy", "kl", "entropy", "length"]
    for stem in stems:
        assert mpimg.imread(out / f"{stem}.png").shape == (400, 600, 4)
    assert mpimg.imread(out / "learning_curves.png").shape == (360, 2000, 4)
    curves = png_curves(str(out / "learning_curves.png"))
    keys = {
        "reward": "reward/mean",
        "entropy": "train/entropy",
        "length": "completion/length",
        "kl": "train/approx_kl",
        "accuracy": "reward/accuracy",
    }
    for stem, key in keys.items():
        for name, final in zip(names, finals, strict=True):
            drawn = curves[stem][name]
            assert (drawn["key"], drawn["points"], drawn["last_step"]) == (key, 2, 2)
            assert drawn["last_value"] == final[key]
    for name, final in zip(names, finals, strict=True):
        assert curves["accuracy"][f"{name} (held-out)"]["last_value"] == final["eval/accuracy"]
