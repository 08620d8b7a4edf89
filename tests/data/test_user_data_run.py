"""A run on a user's JSONL file: its evaluation sets, training batches and reward columns come
from the file (fast), and a tiny GRPO run trains and evaluates on it (heavy: about 70 s)."""

import json
import os

from jaxrl_llm.data import PromptBatcher, load_user_data, task_pool, write_prompts
from jaxrl_llm.rewards.user import BatchReward
from jaxrl_llm.runners import train
from jaxrl_llm.runners.components import SELECTION_SET, build_eval_sets
from jaxrl_llm.stages import load_config
from tests.data.test_user_data import rows, section

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "experiments", "configs", "grpo_tiny.py")


def _config(path, **overrides):
    return load_config(TINY, {"task.name": "my_sums", "task.data.train": path, **overrides})


def test_eval_sets_batches_and_reward_columns_come_from_the_file(tmp_path):
    path = write_prompts(rows(200), tmp_path / "sums.jsonl")
    config = _config(path, **{"eval.selection": True})
    sides = load_user_data(section(path)).sides
    (test, selection) = build_eval_sets(config)
    assert (test.name, selection.name) == ("my_sums", SELECTION_SET)
    assert len(test.examples) == config.task.eval_size == 8
    assert {e.question for e in test.examples} <= {e.question for e in sides.test}
    assert {e.question for e in selection.examples} <= {e.question for e in sides.selection}
    pool = task_pool(config.task, side="train", seed=config.seed)
    assert pool == sides.train  # every train-side row, whatever train_size
    batcher = PromptBatcher(pool, batch_size=7, seed=0)
    seen = [e.question for _ in range(len(pool)) for e in next(batcher)]  # seven epochs
    assert sorted(set(seen)) == sorted(e.question for e in sides.train)

    def by_level(prompts, completions, level, answer):
        return [float(lv) for lv in level]

    reward = BatchReward(by_level, name="by_level")
    reward.check_columns(["level", "answer", "prompt"])
    scores = reward([""] * 2, ["x", "y"], pool[:2])
    assert list(scores.values) == [float(e.metadata["level"]) for e in pool[:2]]


def test_tiny_grpo_run_trains_and_evaluates_on_user_prompts(tmp_path):
    path = write_prompts(rows(200), tmp_path / "sums.jsonl")
    config = _config(path, **{"train.num_steps": 1, "eval.before": False})
    summary = train(config, str(tmp_path / "run"), progress=False)
    assert summary["steps"] == 1
    assert summary["held_out"]["my_sums"] == {"questions": 8, "distinct": 8}
    sides = load_user_data(section(path)).sides
    with open(tmp_path / "run" / "eval_questions.jsonl") as f:
        (record,) = [r for r in map(json.loads, f) if r["set"] == "my_sums"]
    assert set(record["questions"]) <= {e.question for e in sides.test}
    assert record["references"] == [str(2 * int(q.split()[2])) for q in record["questions"]]
