"""Sweeps as data (product / zip helpers, sweep files) and the launcher's scheduling, tables and
XManager job specs, with cheap stand-in commands instead of training runs."""

import csv
import glob
import inspect
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from jaxrl_llm import gin_bindings, plots, sweeps
from jaxrl_llm.launch import backends, cli, plan, prune, sweep
from jaxrl_llm.metrics import MetricsWriter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")
GIN = os.path.join(ROOT, "experiments", "gin", "clip_rloo.gin")


def test_axis_product_zip_concat_values():
    a = sweeps.axis("loss.advantage", ["grpo", "rloo"])
    b = sweeps.axis("seed", [0, 1, 2])
    assert a == [{"loss.advantage": "grpo"}, {"loss.advantage": "rloo"}]
    grid = sweeps.product(a, b)
    assert len(grid) == 6
    assert grid[:3] == [
        {"loss.advantage": "grpo", "seed": s} for s in (0, 1, 2)
    ]  # first varies slowest
    assert sweeps.zipped(a, sweeps.axis("seed", [5, 6])) == [
        {"loss.advantage": "grpo", "seed": 5},
        {"loss.advantage": "rloo", "seed": 6},
    ]
    assert sweeps.product(sweeps.fixed({"train.num_steps": 3}), b)[2] == {
        "train.num_steps": 3,
        "seed": 2,
    }
    assert sweeps.concat(a, b) == a + b


def test_helpers_reject_ambiguous_sweeps():
    with pytest.raises(ValueError, match="different lengths"):
        sweeps.zipped(sweeps.axis("seed", [0, 1]), sweeps.axis("loss.agg", ["token-mean"]))
    with pytest.raises(ValueError, match=r"\['seed'\] are set by two"):
        sweeps.product(sweeps.axis("seed", [0]), sweeps.axis("seed", [1]))
    with pytest.raises(TypeError, match="must be a list"):
        sweeps.axis("task.name", "chain_sum")
    with pytest.raises(ValueError, match="no values"):
        sweeps.axis("seed", [])


def test_trial_names_and_gin_keys():
    trial = {"loss.clip_high": 0.28, "gin/format_reward.max_chars": 40}
    assert sweeps.trial_name(3, trial) == "003_clip_high=0.28_max_chars=40"
    assert (
        sweeps.trial_name(0, {"task.system_prompt": "Be brief / exact"})
        == "000_system_prompt=Be-brief-exact"
    )
    assert sweeps.split(trial) == ({"loss.clip_high": 0.28}, ["format_reward.max_chars = 40"])


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(ROOT, "experiments", "sweeps", "*.py")))
)
def test_every_sweep_file_loads_and_validates_against_its_config(path):
    """Against the grpo tiny config, or the tiny config a sweep names in `TINY_CONFIG` (a PPO
    sweep's critic fields exist only there)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sweep_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tiny = os.path.join(ROOT, getattr(module, "TINY_CONFIG", TINY))
    trials = sweeps.load_sweep(path)
    configs = sweeps.check_trials(tiny, trials)
    assert len(configs) == len(trials) >= 2
    for trial, config in zip(trials, configs, strict=True):
        for key, value in sweeps.split(trial)[0].items():
            node = config
            for part in key.split("."):
                node = node[part]
            assert node == value


def test_check_trials_names_the_bad_trial(tmp_path):
    bad = [{"seed": 1}, {"loss.clip_hihg": 0.3}]
    with pytest.raises(ValueError, match=r"sweep trial 1 .*did you mean loss.clip_high\?"):
        sweeps.check_trials(TINY, bad)
    with pytest.raises(ValueError, match=r"sweep trial 0 .*rollout.group_size must be >= 2"):
        sweeps.check_trials(TINY, [{"rollout.group_size": 1}])
    path = tmp_path / "s.py"
    path.write_text("def sweep():\n    return {'seed': 1}\n")
    with pytest.raises(ValueError, match="must return a non-empty list"):
        sweeps.load_sweep(str(path))
    path.write_text("trials = []\n")
    with pytest.raises(AttributeError, match="must define `sweep\\(\\)`"):
        sweeps.load_sweep(str(path))


def test_plan_builds_one_command_per_trial(tmp_path):
    trials = [{"loss.advantage": "rloo", "eval.before": False, "gin/format_reward.max_chars": 9}]
    [trial] = plan.plan(
        TINY,
        trials,
        str(tmp_path),
        base={"train.num_steps": 2, "seed": 7},
        gin_files=[GIN],
        gin_bindings=["optimizer.b2 = 0.9"],
    )
    assert trial.workdir == str(tmp_path / "000_advantage=rloo_before=False_max_chars=9")
    assert trial.num_steps == 2
    assert trial.argv[:3] == (sys.executable, "-m", "jaxrl_llm.main")
    assert list(trial.argv[7:]) == [
        "--no_progress",
        "--config.train.num_steps=2",
        "--config.seed=7",
        "--config.loss.advantage=rloo",
        "--config.eval.before=false",
        f"--gin_file={GIN}",
        "--gin_bindings=optimizer.b2 = 0.9",
        "--gin_bindings=format_reward.max_chars = 9",
    ]
    assert plan.flag_value(1e-5) == "1e-05" and plan.parse_value("1e-5") == 1e-5
    assert plan.parse_value("rloo") == "rloo" and plan.parse_value("False") is False


def _fake_trials(tmp_path, codes):
    """Trials whose command logs its start/end times and exits with the given code."""
    trials = []
    for i, code in enumerate(codes):
        workdir = str(tmp_path / f"{i:03d}")
        script = (
            "import json, os, sys, time; t0 = time.time(); time.sleep(0.5); "
            f"os.makedirs({workdir!r}, exist_ok=True); "
            f"open(os.path.join({workdir!r}, 'times.json'), 'w').write(json.dumps([t0, time.time()])); "
            f"print('trial {i}'); sys.exit({code})"
        )
        trials.append(
            plan.Trial(i, f"{i:03d}", {"seed": i}, workdir, (sys.executable, "-c", script), 1)
        )
    return trials


def test_run_local_bounds_parallelism_and_records_failures(tmp_path):
    trials = _fake_trials(tmp_path, [0, 0, 3, 0, 0])
    messages = []
    results = backends.run_local(trials, parallel=2, poll_s=0.02, log=messages.append)
    assert [r.status for r in results] == ["ok", "ok", "failed", "ok", "ok"]
    assert [r.returncode for r in results] == [0, 0, 3, 0, 0]
    spans = [json.load(open(os.path.join(t.workdir, "times.json"))) for t in trials]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 2  # two at a time, never three
    assert open(os.path.join(trials[2].workdir, "log.txt")).read() == "trial 2\n"
    assert any("failed (exit 3" in m for m in messages)


def test_only_runs_the_selected_trials(tmp_path, capsys):
    """`select` (launch --only) runs the chosen trials; a finished one still counts as reused and
    the others are left alone; an index the sweep lacks is refused before anything runs."""
    trials = _fake_trials(tmp_path, [0, 0, 0])
    results = backends.run_local(trials, poll_s=0.02, select=lambda t: t.index == 1)
    assert [r.status for r in results] == ["not selected", "ok", "not selected"]
    assert not os.path.exists(trials[0].workdir) and os.path.exists(trials[1].workdir)
    with open(os.path.join(trials[1].workdir, "summary.json"), "w") as f:
        json.dump({"steps": 1}, f)
    again = backends.run_local(trials, poll_s=0.02, select=lambda t: t.index == 2)
    assert [r.status for r in again] == ["not selected", "reused", "ok"]
    assert sweeps.parse_int_list("25-27,30", flag="--only") == [25, 26, 27, 30]
    # `--only 2,0` runs trial 2 first; the results come back in plan order
    for trial in trials:
        shutil.rmtree(trial.workdir, ignore_errors=True)
    messages = []
    ordered = sweep.in_only_order(trials, [2, 0])
    assert [t.index for t in ordered] == [2, 0, 1]
    results = backends.run_local(
        ordered, poll_s=0.02, log=messages.append, select=lambda t: t.index in (2, 0)
    )
    started = [m for m in messages if "started" in m]
    assert trials[2].name in started[0] and trials[0].name in started[1]
    assert [r.status for r in sorted(results, key=lambda r: r.trial.index)] == [
        "ok", "not selected", "ok",
    ]  # fmt: skip
    argv = ["--config", TINY, "--seeds", "0,1", "--sweep_dir", str(tmp_path / "s"), "--only", "5"]
    assert cli.main(argv) == 2
    assert "--only names trials [5] the sweep does not have (its trials are 0-1" in (
        capsys.readouterr().err
    )
    assert not os.path.exists(tmp_path / "s" / "000_seed=0")


def test_finished_trials_are_reused(tmp_path):
    [trial] = _fake_trials(tmp_path, [0])
    os.makedirs(trial.workdir)
    with open(os.path.join(trial.workdir, "summary.json"), "w") as f:
        json.dump({"steps": 1}, f)
    assert [r.status for r in backends.run_local([trial])] == ["reused"]
    assert [r.status for r in backends.run_local([trial], rerun=True)] == ["ok"]


def test_a_run_its_config_ended_early_is_finished_and_a_signalled_one_is_not(tmp_path):
    [trial] = _fake_trials(tmp_path, [0])
    os.makedirs(trial.workdir)
    path = os.path.join(trial.workdir, "summary.json")
    with open(path, "w") as f:  # SIGTERM after step 0 of 1: resumed when relaunched
        json.dump({"steps": 0, "stopped_by": "SIGTERM"}, f)
    assert not plan.is_finished(trial)
    with open(path, "w") as f:  # the reward-model check ended it: done, as asked
        json.dump({"steps": 0, "ended_early": "config.rewards.model_check_auc: ..."}, f)
    assert plan.is_finished(trial)
    assert [r.status for r in backends.run_local([trial])] == ["reused"]


def _curve_trial(tmp_path, index, overrides, curve, entropy=(0.8, 0.6)):
    """A finished-on-run trial that logs held-out accuracies `curve` at steps 0, 1, ... and
    sampled entropies `entropy` at steps 1, 2, ..."""
    workdir = str(tmp_path / f"{index:03d}")
    rows = [{"step": step, "eval/accuracy": acc} for step, acc in enumerate(curve)]
    rows += [{"step": step, "train/entropy": h} for step, h in enumerate(entropy, start=1)]
    script = (
        "import json, os; "
        f"os.makedirs({workdir!r}, exist_ok=True); "
        f"open(os.path.join({workdir!r}, 'metrics.jsonl'), 'w').write("
        f"''.join(json.dumps(r) + '\\n' for r in {rows!r})); "
        f"json.dump({{'steps': 1}}, open(os.path.join({workdir!r}, 'summary.json'), 'w'))"
    )
    argv = (sys.executable, "-c", script)
    return plan.Trial(index, f"{index:03d}", dict(overrides), workdir, argv, 1)


def test_prune_skips_a_setting_once_a_run_falls_from_its_best(tmp_path):
    """Setting lr=1e-4 falls 5 points on chain_sum seed 0: its other seed and its gcd run are
    pruned; lr=1e-5 (a 2-point dip) runs everything; a relaunch prunes the same trials."""
    falls, steady = [0.10, 0.30, 0.25], [0.10, 0.30, 0.28]
    specs = [
        ({"optimizer.learning_rate": 1e-4, "task.name": "chain_sum", "seed": 0}, falls),
        ({"optimizer.learning_rate": 1e-4, "task.name": "chain_sum", "seed": 1}, steady),
        ({"optimizer.learning_rate": 1e-4, "task.name": "gcd", "seed": 0}, steady),
        ({"optimizer.learning_rate": 1e-5, "task.name": "chain_sum", "seed": 0}, steady),
        ({"optimizer.learning_rate": 1e-5, "task.name": "gcd", "seed": 0}, steady),
    ]
    trials = [_curve_trial(tmp_path, i, o, c) for i, (o, c) in enumerate(specs)]
    skip = prune.setting_pruner(trials, max_drop=3.0)
    assert skip(trials[1]) is None  # nothing has finished yet
    messages = []
    results = backends.run_local(trials, poll_s=0.02, log=messages.append, skip=skip)
    assert [r.status for r in results] == ["ok", "pruned", "pruned", "ok", "ok"]
    assert any(
        "001: pruned (000 ended 5.0 points below its best on the test side (> 3))" in m
        for m in messages
    )
    assert not os.path.exists(trials[1].workdir)
    again = backends.run_local(trials, poll_s=0.02, log=lambda _: None, skip=skip)
    assert [r.status for r in again] == ["reused", "pruned", "pruned", "reused", "reused"]
    # across nothing, the gcd run is a setting of its own and runs
    by_task = prune.setting_pruner(trials, max_drop=3.0, across=())
    assert by_task(trials[2]) is None and by_task(trials[1]) is not None
    with pytest.raises(ValueError, match="--prune_drop=0.0 must be > 0"):
        prune.setting_pruner(trials, max_drop=0.0)
    with pytest.raises(ValueError, match="--prune_entropy=1.5 must be in"):
        prune.setting_pruner(trials, min_entropy_ratio=1.5)
    with pytest.raises(
        ValueError, match="needs --prune_drop, --prune_entropy or --prune_entropy_max"
    ):
        prune.setting_pruner(trials)


def test_prune_on_entropy_and_a_drop_of_exactly_the_limit(tmp_path):
    """A run that ends exactly 3 points under its best (0.355 -> 0.325, 2.9999... or 3.00...1 in
    floats) stays within the rule; one keeping 0.07 of its first sampled entropy prunes its
    setting under --prune_entropy 0.333 and not without it."""
    collapsed = {"stabilise.dynamic_sampling": True, "task.name": "chain_sum"}
    specs = [
        ({**collapsed, "seed": 0}, [0.09, 0.355, 0.325], (0.8, 0.056)),
        ({**collapsed, "seed": 1}, [0.09, 0.3, 0.3], (0.8, 0.6)),
        (
            {"loss.entropy_coef": 0.001, "task.name": "chain_sum", "seed": 0},
            [0.09, 0.3],
            (0.8, 0.5),
        ),
    ]
    trials = [_curve_trial(tmp_path, i, o, c, e) for i, (o, c, e) in enumerate(specs)]
    results = backends.run_local(trials[:1], poll_s=0.02, log=lambda _: None)
    assert [r.status for r in results] == ["ok"]
    assert prune.setting_pruner(trials, max_drop=3.0)(trials[1]) is None
    skip = prune.setting_pruner(trials, max_drop=3.0, min_entropy_ratio=0.333)
    assert skip(trials[1]) == "000 kept 0.070 of its first sampled entropy (< 0.333)"
    assert skip(trials[2]) is None  # another setting


def test_prune_on_an_entropy_blow_up(tmp_path):
    """A run that ends at 2.5 times its first sampled entropy prunes its setting under
    --prune_entropy_max 2; one at exactly twice it does not."""
    setting = {"stabilise.clip_cov_fraction": 0.1, "task.name": "gcd"}
    specs = [
        ({**setting, "seed": 0}, [0.03, 0.35], (1.6, 4.0)),
        ({**setting, "seed": 1}, [0.03, 0.3], (1.6, 1.6)),
        (
            {"stabilise.clip_cov_fraction": 0.05, "task.name": "gcd", "seed": 0},
            [0.03, 0.3],
            (1.5, 3.0),
        ),  # fmt: skip
        (
            {"stabilise.clip_cov_fraction": 0.05, "task.name": "gcd", "seed": 1},
            [0.03, 0.3],
            (1.5, 1.5),
        ),  # fmt: skip
    ]
    trials = [_curve_trial(tmp_path, i, o, c, e) for i, (o, c, e) in enumerate(specs)]
    backends.run_local([trials[0], trials[2]], poll_s=0.02, log=lambda _: None)
    skip = prune.setting_pruner(trials, max_entropy_ratio=2.0)
    assert skip(trials[1]) == "000 ended at 2.500 times its first sampled entropy (> 2)"
    assert skip(trials[3]) is None
    assert prune.setting_pruner(trials, min_entropy_ratio=0.333)(trials[1]) is None
    with pytest.raises(ValueError, match="--prune_entropy_max=1.0 must be > 1"):
        prune.setting_pruner(trials, max_entropy_ratio=1.0)


def test_summary_table_holds_the_final_metrics_exactly(tmp_path):
    trials = _fake_trials(tmp_path, [0, 1])
    values = {0: [0.1, 1 / 3], 1: [0.25, 2 / 7]}
    for t in trials:
        writer = MetricsWriter(t.workdir, tensorboard=False)
        writer.write_scalars(0, {"eval/accuracy": 0.0})
        for step, v in enumerate(values[t.index], start=1):
            writer.write_scalars(
                step, {"reward/mean": v, "train/entropy": 2 * v, "train/approx_kl": v / 10}
            )
        writer.write_scalars(2, {"eval/accuracy": 0.125 * (t.index + 1)})
        writer.close()
    results = [
        backends.TrialResult(trials[0], "ok", 0, 1.0),
        backends.TrialResult(trials[1], "failed", 1, 2.0),
    ]
    csv_path, md_path = sweep.write_summary(str(tmp_path), results)
    rows = list(csv.DictReader(open(csv_path)))
    assert [r["trial"] for r in rows] == ["000", "001"]
    assert [r["status"] for r in rows] == ["ok", "failed"]
    for row, t in zip(rows, trials, strict=True):
        assert row["seed"] == str(t.index)
        assert row["step"] == "2"
        assert float(row["reward/mean"]) == values[t.index][-1]  # exact: repr round-trips
        assert float(row["train/entropy"]) == 2 * values[t.index][-1]
        assert float(row["eval/accuracy"]) == 0.125 * (t.index + 1)
    assert "train/kl_ref" not in rows[0]  # only metrics some trial logged
    md = open(md_path).read().splitlines()
    assert md[0].startswith("| trial | status | seconds | seed | step | reward/mean |")
    assert md[2].split(" | ")[5] == "0.3333"


def test_xmanager_job_script_keeps_the_log_and_exit_code(tmp_path):
    """What XManager's local executor runs for a trial (`/bin/sh -c ...`), run here without it."""
    [trial] = _fake_trials(tmp_path, [5])
    args = backends.xm_job_args(trial)
    assert args[0] == "-c"
    proc = subprocess.run(["/bin/sh", *args], timeout=60)
    assert proc.returncode == 5
    assert open(os.path.join(trial.workdir, "returncode")).read().strip() == "5"
    assert open(os.path.join(trial.workdir, "log.txt")).read() == "trial 0\n"


def test_xmanager_launcher_runs_local_binaries(tmp_path, monkeypatch):
    """Runs only where XManager is installed (a separate venv: its protobuf<7 pin conflicts with
    constraints.txt); then it needs no Docker: trials are `xm.binary` jobs on `xm_local.Local()`."""
    pytest.importorskip("xmanager", reason="XManager is not installed (optional `xmanager` extra)")
    monkeypatch.setenv("HOME", str(tmp_path))  # XManager's sqlite database goes under ~/.xmanager
    trials = _fake_trials(tmp_path, [0, 2, 0])
    start = time.time()
    results = backends.run_xmanager(trials, parallel=2, log=lambda m: None)
    assert [r.status for r in results] == ["ok", "failed", "ok"]
    assert [r.returncode for r in results] == [0, 2, 0]
    assert time.time() - start < 60


@pytest.mark.parametrize(
    "module",
    [gin_bindings, backends, cli, plan, prune, sweep, plots, sweeps],
    ids=lambda m: m.__name__,
)
def test_public_names_have_docstrings(module):
    assert module.__doc__ and module.__doc__.strip()
    for name, obj in vars(module).items():
        if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if obj.__module__ == module.__name__:
            assert obj.__doc__ and obj.__doc__.strip(), f"{module.__name__}.{name}"


def test_prune_reads_the_selection_side_where_a_run_has_one(tmp_path):
    """A run's test-side curve is what tables report; pruning on it would let the reported
    questions choose. A run that falls 5 points on the test side but not on the selection side
    is not pruned; one that falls on the selection side is, and the reason names the side."""

    def finished(index, test, selection):
        workdir = tmp_path / f"{index:03d}"
        workdir.mkdir()
        rows = [
            {"step": s, "eval/accuracy": t, "eval/selection/accuracy": v}
            for s, (t, v) in enumerate(zip(test, selection, strict=True))
        ]
        (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (workdir / "summary.json").write_text('{"steps": 1}')
        overrides = {"optimizer.learning_rate": 10.0**-index, "seed": 0}
        return plan.Trial(index, f"{index:03d}", overrides, str(workdir), ("true",), 1)

    falls, steady = [0.10, 0.30, 0.25], [0.10, 0.30, 0.29]
    test_falls, selection_falls = finished(1, falls, steady), finished(2, steady, falls)
    later = [
        plan.Trial(i + 2, f"{i + 2:03d}", {**t.overrides, "seed": 1}, "", ("true",), 1)
        for i, t in enumerate((test_falls, selection_falls), start=1)
    ]
    skip = prune.setting_pruner([test_falls, selection_falls, *later], max_drop=3.0)
    assert skip(later[0]) is None
    assert skip(later[1]) == "002 ended 5.0 points below its best on the selection side (> 3)"
