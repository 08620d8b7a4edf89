"""A researcher's own experiment: a JSONL file and a reward module train the same run from the
command line (`--import`, `config.task.data`, `config.rewards.functions`) and from Python
(`jaxrl_llm.train(..., train_data=rows, reward_fns=[fn])`); `evaluate --workdir` then works on
it, importing the run's module itself, and reads a held-out file with the run's columns."""

import json
import os
import subprocess
import sys

import pytest

import jaxrl_llm
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.user_imports import import_module_or_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")
REWARD_MODULE = """
def brevity(prompts, completions, answer, **columns):
    return [1.0 / (1.0 + len(c)) for c in completions]
"""
ROWS = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b), "tag": "sum"}
        for a in range(30) for b in range(a, 30)]  # fmt: skip
STEPS = 2
CLOCKS = ("time/", "seconds", "_s")  # wall-clock figures differ between any two runs


def _comparable(rows):
    return [{k: v for k, v in r.items() if not any(c in k for c in CLOCKS)} for r in rows]


def _main(args, cwd):
    command = [sys.executable, "-m", "jaxrl_llm.main", *args, "--no_progress"]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("own")
    module = tmp / "my_rewards.py"
    module.write_text(REWARD_MODULE)
    data = tmp / "sums.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    common = {"train.num_steps": STEPS, "train.checkpoint_every": STEPS, "task.name": "sums"}
    cli = tmp / "cli"
    flags = [f"--config.{k}={v}" for k, v in common.items()]
    _main(["--import", str(module), "--config", TINY, "--workdir", str(cli), *flags,
           f"--config.task.data.train={data}", "--config.rewards.functions=my_rewards:brevity"],
          cwd=tmp)  # fmt: skip
    python = tmp / "python"
    brevity = import_module_or_file(str(module)).brevity
    jaxrl_llm.train(TINY, str(python), overrides=common, train_data=ROWS, reward_fns=[brevity],
                    progress=False)  # fmt: skip
    return tmp, cli, python


def test_the_command_line_and_python_give_the_same_run(runs):
    _, cli, python = runs
    cli_rows, python_rows = read_metrics(str(cli)), read_metrics(str(python))
    assert any("reward/brevity" in r for r in cli_rows)
    assert max(r["step"] for r in cli_rows) == STEPS
    assert _comparable(cli_rows) == _comparable(python_rows)
    assert json.load(open(cli / "imports.json")) == [str(runs[0] / "my_rewards.py")]


def test_evaluate_a_users_run_and_its_held_out_file(runs):
    tmp, cli, _ = runs
    held_out = tmp / "held_out.jsonl"
    held_out.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:5]))
    out = tmp / "eval"
    command = [sys.executable, "-m", "jaxrl_llm.evaluate", "--workdir", str(cli), "--jsonl",
               str(held_out), "--size", "4", "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.load(open(out / f"results_step{STEPS}.json"))
    assert set(results["tasks"]) >= {"sums", "held_out"} and results["scorer"] == "stated"
    assert results["tasks"]["held_out"]["prompts"] == 5
    lines = [json.loads(line) for line in open(out / "eval_completions.jsonl")]
    held = [line for line in lines if line["set"] == "held_out"]
    assert [line["prompt"] for line in held] == [r["prompt"] for r in ROWS[:5]]
    assert {"id", "completion", "answer", "reference", "score", "truncated"} <= set(held[0])
