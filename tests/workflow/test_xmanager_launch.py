"""A two-trial sweep through XManager's local executor (`jaxrl_llm.launch.backends.run_xmanager`).

XManager pins protobuf<7 and constraints.txt pins 7.x, so it lives in its own venv
(`bash scripts/test_xmanager.sh`, which CI runs): that venv has no jax, so this file imports
nothing that does, and runs with `--noconftest`. Each trial is the sweep's real
`python -m jaxrl_llm.main ...` command line with a stand-in interpreter that records its
arguments and exits with the code the trial's seed asks for. XManager's local executor runs
`xm.binary` jobs as local processes: no Docker daemon is needed.
"""

import os
import stat

import pytest

from jaxrl_llm import sweeps
from jaxrl_llm.launch import backends, plan

REQUIRED = os.environ.get("JAXRL_REQUIRE_XMANAGER") == "1"
STAND_IN = """#!/bin/sh
# Records the trial's command line; exits 3 for the trial with seed 1.
for arg in "$@"; do echo "$arg"; done > "$(dirname "$0")/argv.$$"
case "$*" in *--config.seed=1*) exit 3;; esac
exit 0
"""


def test_two_trial_sweep_runs_through_xmanager(tmp_path, monkeypatch):
    if not REQUIRED:
        pytest.importorskip(
            "xmanager",
            reason="XManager is not installed: it pins protobuf<7 against constraints.txt's 7.x, "
            "so it runs in its own venv (bash scripts/test_xmanager.sh)",
        )
    monkeypatch.setenv("HOME", str(tmp_path))  # XManager's sqlite database: ~/.xmanager
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text(STAND_IN)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    config = os.path.abspath("experiments/configs/grpo_tiny.py")
    trials = []
    for i, overrides in enumerate(sweeps.axis("seed", [0, 1])):
        name = sweeps.trial_name(i, overrides)
        workdir = str(tmp_path / "sweep" / name)
        argv = plan.trial_command(config, workdir, overrides, python=str(python))
        trials.append(plan.Trial(i, name, dict(overrides), workdir, tuple(argv), 1))
    messages = []
    results = backends.run_xmanager(trials, parallel=2, log=messages.append)
    assert [r.status for r in results] == ["ok", "failed"]
    assert [r.returncode for r in results] == [0, 3]
    assert any(m.startswith("[launch] XManager experiment ") for m in messages)
    recorded = sorted(
        open(python.parent / f).read().split("\n")[:-1]
        for f in os.listdir(python.parent)
        if f.startswith("argv.")
    )
    assert [argv[:3] for argv in recorded] == [["-m", "jaxrl_llm.main", "--config"]] * 2
    assert sorted(argv[-1] for argv in recorded) == ["--config.seed=0", "--config.seed=1"]
