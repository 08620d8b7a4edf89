"""`python -m jaxrl_llm.main`'s episode runs on tiny configs: tool use with SFT warm-up, and
Multi-IF with turn-level credit; a rerun in the same workdir resumes. Episodes under the
asynchronous schedule keep the staleness bound."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl_llm.algorithms.staleness import behaviour_version
from jaxrl_llm.config import validate_config
from jaxrl_llm.runners import restore_policy, train
from jaxrl_llm.stages import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rows(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize(
    "name",
    # the calculator's run is slow (default coverage: multi_if_tiny here, and
    # test_episodes.py::test_tool_faults_are_counted_and_do_not_stop_the_run)
    [pytest.param("tool_calculator_tiny", marks=pytest.mark.slow), "multi_if_tiny"],
)
def test_episode_run_trains_and_resumes(name, tmp_path):
    config = load_config(os.path.join(ROOT, "experiments/configs", f"{name}.py"))
    workdir = str(tmp_path / name)
    summary = train(config, workdir, progress=False)
    assert summary["steps"] == config.train.num_steps
    steps = [r for r in _rows(workdir) if "train/loss" in r]
    assert [r["step"] for r in steps] == list(range(1, config.train.num_steps + 1))
    first = steps[0]
    assert first["episode/turns"] >= 1 and "episode/end/done" in first
    assert first["train/rows"] == config.rollout.num_prompts * config.rollout.group_size
    if name == "multi_if_tiny":
        assert "turn0/score" in first and "algo/turn_advantage_abs" in first
        assert "eval/turn2/accuracy" in _rows(workdir)[-1]
    else:
        assert summary["warmup"]["steps"] == config.env.warmup_steps
        assert "eval/tool/episodes_with_call" in _rows(workdir)[0]
    again = train(
        load_config(os.path.join(ROOT, "experiments/configs", f"{name}.py")),
        workdir,
        progress=False,
    )
    assert again["steps"] == config.train.num_steps
    assert len([r for r in _rows(workdir) if "train/loss" in r]) == config.train.num_steps

    # The evaluation command on the run: the same greedy episodes as the run's last evaluation.
    out = subprocess.run(
        [sys.executable, "-m", "jaxrl_llm.evaluate", "--workdir", workdir],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    step = config.train.num_steps
    report = json.load(open(os.path.join(workdir, "eval", f"results_step{step}.json")))
    result = report["tasks"][config.env.name]
    assert result["accuracy"] == summary["eval_after"]["accuracy"]
    table = out.stdout
    if name == "multi_if_tiny":
        assert "turn 2 accuracy" in table and result["turn2/accuracy"] >= 0.0
    else:
        assert "episodes with a tool call" in table and "tool/episodes_with_call" in result


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("env.name", "chess", "config.env.name='chess'"),
        ("env.credit", "token", "config.env.credit='token'"),
        ("env.max_turn_tokens", 4096, "max_turn_tokens=4096 must be smaller"),
        ("env.turn_discount", 0.0, "config.env.turn_discount=0.0"),
        ("env.tools", "calculator,shell", "config.env.tools='calculator,shell'"),
    ],
)
def test_bad_env_fields_are_named(field, value, message):
    config = load_config(os.path.join(ROOT, "experiments/configs/tool_calculator_tiny.py"))
    section, key = field.split(".")
    with config.unlocked():
        config[section][key] = value
    with pytest.raises(
        ValueError, match=message.replace("(", r"\(").replace(".", r"\.").replace("[", r"\[")
    ):
        validate_config(config)
        from jaxrl_llm.envs.tasks import episode_task

        episode_task(config)


def test_episodes_run_asynchronously_within_the_staleness_bound(tmp_path):
    k, steps = 2, 4
    config = load_config(
        os.path.join(ROOT, "experiments/configs/multi_if_tiny.py"),
        {
            "train.num_steps": steps,
            "eval.before": False,
            "eval.after": False,
            "async_rl.enabled": True,
            "async_rl.max_staleness": k,
            "off_policy.correction": "decoupled_ppo",
        },
    )
    summary = train(config, str(tmp_path), progress=False)
    rows = [r for r in _rows(str(tmp_path)) if "train/loss" in r]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for row in rows:
        s = row["step"] - 1
        assert row["async/version"] == behaviour_version(s, k)
        assert row["async/staleness"] == min(s, k) <= k
        assert row["episode/turns"] >= 1 and "turn0/score" in row  # episodes, turn credit
        assert row["train/rows"] == config.rollout.num_prompts * config.rollout.group_size
    histogram = summary["async"]["staleness_histogram"]
    assert sum(histogram.values()) == steps * 8 and max(histogram) == k
    # The episodes' rewards have spread, so stale steps train on another policy's episodes.
    stale = [r for r in rows if r["async/staleness"] > 0]
    assert stale and all(r["train/off_policy/kl_behaviour"] > 0 for r in stale)
    assert restore_policy(str(tmp_path)).step == steps


def test_episodes_refuse_inflight_weight_updates():
    config = load_config(os.path.join(ROOT, "experiments/configs/multi_if_tiny.py"))
    with config.unlocked():
        config.async_rl.enabled = True
        config.async_rl.inflight_updates = True
        config.async_rl.deterministic = False
    with pytest.raises(ValueError, match=r"config\.async_rl\.inflight_updates"):
        validate_config(config)
