"""Evaluation during training (eval.tasks, samples, every N steps) and `python -m
jaxrl_llm.evaluate` on the run it wrote, on the tiny config."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl_llm.config import apply_overrides, config_for, make_tiny
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _evaluate(*args):
    return subprocess.run(
        [sys.executable, "-m", "jaxrl_llm.evaluate", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


# Slow (default coverage: envs/test_episode_runner.py runs `python -m jaxrl_llm.evaluate` on a
# run's workdir; tests/evals/test_suite.py checks pass@k, maj@k and the adversarial sets).
@pytest.mark.slow
def test_train_with_a_suite_then_evaluate_the_checkpoint(tmp_path):
    config = make_tiny(config_for("grpo"))
    overrides = {
        "train.num_steps": 2,
        "eval.every": 1,
        "eval.tasks": "gcd",
        "eval.num_samples": 2,
        "eval.ks": (1, 2),
        "task.eval_size": 4,
    }
    workdir = str(tmp_path / "run")
    summary = train(apply_overrides(config, overrides), workdir, progress=False)
    for key in ("accuracy", "pass@2", "maj@2", "truncated", "gcd/accuracy", "gcd/pass@2"):
        assert 0.0 <= summary["eval_after"][key] <= 1.0, key
    logged = [row for row in read_metrics(workdir) if "eval/gcd/accuracy" in row]
    # before, every step; the step-2 evaluation is also the one after training (not rerun)
    assert [row["step"] for row in logged] == [0, 1, 2]

    out = _evaluate(
        "--workdir",
        workdir,
        "--tasks",
        "chain_sum,lcm",
        "--size",
        "4",
        "--num_samples",
        "2",
        "--ks",
        "1,2",
        "--adversarial",
        "--adversarial_size",
        "4",
        "--max_new_tokens",
        "4",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.load(open(os.path.join(workdir, "eval", "results_step2.json")))
    assert report["step"] == 2 and set(report["tasks"]) == {"chain_sum", "lcm"}
    assert report["tasks"]["lcm"]["prompts"] == 4 and "maj@2" in report["tasks"]["lcm"]
    assert 0.0 <= report["adversarial"]["template_accuracy"] <= 1.0
    table = open(os.path.join(workdir, "eval", "results_step2.md")).read()
    assert "| lcm |" in table and "Adversarial arithmetic" in table and table in out.stdout
    [row] = read_metrics(os.path.join(workdir, "eval"))
    assert row["step"] == 2 and "eval/lcm/pass@2" in row
    assert os.listdir(os.path.join(workdir, "eval", "tensorboard"))

    # The same checkpoint by path; a wrong one fails with one line naming the fix.
    out = _evaluate(
        "--checkpoint",
        os.path.join(workdir, "checkpoints", "2"),
        "--size",
        "2",
        "--out",
        str(tmp_path / "by_path"),
        "--max_new_tokens",
        "2",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert os.path.exists(tmp_path / "by_path" / "results_step2.json")
    out = _evaluate("--workdir", workdir, "--step", "7")
    assert out.returncode == 1 and "no checkpoint 7" in out.stderr
