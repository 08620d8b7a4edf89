"""Learning-curve PNGs from hand-written metrics: files, sizes, one coloured line per run, and the
numbers stored alongside each picture."""

import json
import math
import os

import numpy as np
import pytest
from matplotlib import colors
from matplotlib import image as mpimg

from jaxrl_llm import plots
from jaxrl_llm.metrics import MetricsWriter

STEMS = ["reward", "accuracy", "kl", "entropy", "length", "learning_curves"]


def _write_run(workdir, rewards, *, kl_ref=False, offset=0.0):
    writer = MetricsWriter(str(workdir), tensorboard=False)
    writer.write_scalars(0, {"eval/accuracy": 0.1 + offset})
    for step, r in enumerate(rewards, start=1):
        row = {
            "reward/mean": r,
            "reward/accuracy": r / 2,
            "train/entropy": 3.0 - step / 10 - offset,
            "completion/length": 10.0 + step,
            "train/approx_kl": 0.001 * step,
        }
        if kl_ref:
            row["train/kl_ref"] = 0.01 * step
        writer.write_scalars(step, row)
    writer.write_scalars(len(rewards), {"eval/accuracy": 0.5 + offset})
    writer.close()


def _has_colour(png, colour, min_pixels=20):
    rgb = mpimg.imread(png)[..., :3]
    target = np.asarray(colors.to_rgb(colour))
    return int(np.sum(np.all(np.abs(rgb - target) < 0.02, axis=-1))) >= min_pixels


def test_one_run_gives_six_valid_pngs_with_its_last_values(tmp_path):
    _write_run(tmp_path / "run", [0.0, 0.25, 0.5], kl_ref=True)
    paths = plots.plot_runs(str(tmp_path / "run"), str(tmp_path / "out"))
    assert [os.path.basename(p) for p in paths] == [f"{s}.png" for s in STEMS]
    for path in paths[:-1]:
        assert mpimg.imread(path).shape == (400, 600, 4)
    assert mpimg.imread(paths[-1]).shape == (360, 2000, 4)
    curves = plots.png_curves(paths[-1])
    assert curves["reward"]["run"] == {
        "key": "reward/mean",
        "points": 3,
        "last_step": 3,
        "last_value": 0.5,
    }
    assert curves["kl"]["run"]["key"] == "train/kl_ref"  # the reference KL wins over approx_kl
    assert curves["kl"]["run"]["last_value"] == pytest.approx(0.03)
    assert curves["accuracy"]["run (held-out)"] == {
        "key": "eval/accuracy",
        "points": 2,
        "last_step": 3,
        "last_value": 0.5,
    }
    assert plots.png_curves(paths[0]) == {"reward": curves["reward"]}
    assert _has_colour(paths[0], "C0") and not _has_colour(paths[0], "C1")


def test_a_sweep_draws_one_line_per_trial_in_sweep_order(tmp_path):
    sweep_dir = tmp_path / "sweep"
    names = ["001_seed=1", "000_seed=0"]  # sweep.json order, not alphabetical
    for i, name in enumerate(names):
        _write_run(sweep_dir / name, [0.1 * (i + 1)] * 2, offset=0.2 * i)
    with open(sweep_dir / "sweep.json", "w") as f:
        json.dump({"trials": [{"name": n, "workdir": str(sweep_dir / n)} for n in names]}, f)
    assert list(plots.find_runs(str(sweep_dir))) == names
    out = tmp_path / "plots"
    assert plots.main([str(sweep_dir), "--out", str(out)]) == 0
    curves = plots.png_curves(str(out / "entropy.png"))["entropy"]
    assert list(curves) == names
    assert curves[names[1]]["last_value"] == pytest.approx(3.0 - 0.2 - 0.2)
    assert _has_colour(str(out / "entropy.png"), "C0") and _has_colour(
        str(out / "entropy.png"), "C1"
    )
    # A moved sweep directory still resolves its trials next to sweep.json.
    os.rename(sweep_dir, tmp_path / "moved")
    assert list(plots.find_runs(str(tmp_path / "moved"))) == names


def test_smoothing_and_errors(tmp_path):
    assert plots.smooth([1.0, 3.0, float("nan"), 5.0], 0.5) == [1.0, 2.0, 2.0, 3.5]
    assert plots.smooth([1.0, 2.0], 0.0) == [1.0, 2.0]
    assert math.isnan(plots.smooth([float("nan"), 1.0], 0.5)[0])
    with pytest.raises(FileNotFoundError, match="neither a run nor a sweep"):
        plots.find_runs(str(tmp_path))
    _write_run(tmp_path / "r", [0.0])
    with pytest.raises(ValueError, match="smoothing"):
        plots.plot_runs(str(tmp_path / "r"), str(tmp_path / "o"), smoothing=1.0)
    assert plots.main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2


def test_a_finished_run_gets_its_plots_and_one_line_naming_its_outputs(tmp_path):
    _write_run(tmp_path, [0.1, 0.4])
    (tmp_path / "summary.json").write_text("{}")
    lines = []
    paths = plots.plot_finished_run(str(tmp_path), log=lines.append)
    assert [os.path.basename(p) for p in paths] == [f"{s}.png" for s in STEMS]
    assert all(os.path.isfile(tmp_path / "plots" / f"{s}.png") for s in STEMS)
    assert lines == [
        f"[jaxrl_llm] outputs in {tmp_path}: metrics.jsonl, eval_completions.jsonl, summary.json, plots/"
    ]


def test_a_plotting_error_is_logged_not_raised(tmp_path, monkeypatch):
    _write_run(tmp_path, [0.1])

    def broken(*args, **kwargs):
        raise RuntimeError("no backend")

    monkeypatch.setattr(plots, "plot_runs", broken)
    lines = []
    assert plots.plot_finished_run(str(tmp_path), log=lines.append) == []
    assert lines == [
        "[jaxrl_llm] warning: curves not plotted (RuntimeError: no backend)",
        f"[jaxrl_llm] outputs in {tmp_path}: metrics.jsonl, eval_completions.jsonl",
    ]
