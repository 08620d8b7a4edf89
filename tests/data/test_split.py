"""The train / selection / test split by hash: no question on two sides, for every source."""

import json

import ml_collections
import pytest

from jaxrl_llm.data import JsonlSource, task_pool, task_source
from jaxrl_llm.data.split import (
    SideIndex,
    distinct_questions,
    normalize_question,
    partition,
    side_of,
)
from tests.data.helpers import task_section


def keys(source):
    return {normalize_question(ex.question) for ex in source}


def test_normalize_question_exact():
    assert normalize_question("  Find the GCD of\n12,  18. ") == "find the gcd of 12, 18."


def test_side_is_stable_and_ignores_case_and_spaces():
    assert side_of("What is 2 + 3?") == side_of("  what is 2 +   3? ") == "train"
    # hand-picked from a scan: the 5th candidate "q4" hashes to the held-out side
    # hand-picked from a scan: "q4" hashes below 0.1 (test), "q5" between 0.1 and 0.2
    assert [side_of(f"q{i}") for i in range(6)] == ["train"] * 4 + ["test", "selection"]
    # the test side is the old held-out side: the same positions below held_out_fraction
    assert side_of("q5", selection_fraction=0.05) == "train"


def test_side_shares_are_the_fractions():
    questions = [f"question number {i}" for i in range(20_000)]
    sides = [side_of(q) for q in questions]
    assert abs(sides.count("test") / 20_000 - 0.1) < 0.01
    assert abs(sides.count("selection") / 20_000 - 0.1) < 0.01
    sides = [side_of(q, held_out_fraction=0.3, selection_fraction=0.2) for q in questions]
    assert abs(sides.count("test") / 20_000 - 0.3) < 0.015
    assert abs(sides.count("selection") / 20_000 - 0.2) < 0.015


def test_partition_exact():
    items = [f"q{i}" for i in range(16)]
    sides = partition(items, lambda q: q)
    assert sides.test == ["q4", "q7", "q15"] and sides.selection == ["q5"]
    assert sorted(sides.train + sides.selection + sides.test) == sorted(items)


def test_side_index_positions_and_refusal():
    index = SideIndex(lambda i: f"q{i}", side="test", size=3, distinct=True)
    assert index.resolve_all() == [4, 7, 15]
    # "held_out" is the old name of the test side
    assert SideIndex(lambda i: f"q{i}", side="held_out", size=3).resolve_all() == [4, 7, 15]
    assert SideIndex(lambda i: f"q{i}", side="selection", size=3).resolve_all() == [5, 17, 39]
    tiny = SideIndex(lambda i: f"q{i % 16}", side="test", size=5, distinct=True,
                     size_field="config.task.eval_size")  # fmt: skip
    with pytest.raises(ValueError, match=r"config.task.eval_size=5 .* gave only 3 .*at most 3"):
        tiny.resolve_all()
    tiny = SideIndex(lambda i: f"q{i % 16}", side="selection", size=2, distinct=True,
                     size_field="config.task.eval_size")  # fmt: skip
    with pytest.raises(ValueError, match=r"eval_size=2 .* selection side .* only 1 .*"
                       r"at most 1.*config.task.selection_fraction\.$"):  # fmt: skip
        tiny.resolve_all()
    with pytest.raises(ValueError, match="held_out_fraction=1.5"):
        SideIndex(lambda i: "", side="train", size=1, held_out_fraction=1.5)
    with pytest.raises(ValueError, match="split='dev' must be one of"):
        SideIndex(lambda i: "", side="dev", size=1)


def test_sides_of_a_preset_are_disjoint_and_fixed():
    section = task_section("gcd")
    test = task_pool(section, side="test")
    assert [ex.question for ex in task_pool(section, side="held_out")] == [
        ex.question for ex in test
    ]  # "held_out" is the old name of "test"
    selection = task_pool(section, side="selection")
    assert len(selection) == 200 and keys(selection) & keys(test) == set()
    for seed in (0, 1):
        pool = task_pool(section, side="train", seed=seed)
        assert keys(pool) & (keys(test) | keys(selection)) == set()
    # the evaluation sets do not move with the training seed
    assert [ex.question for ex in task_pool(section, side="test", seed=7)] == [
        ex.question for ex in test
    ]


@pytest.mark.parametrize("task", ["basic_arithmetic", "spell_backward"])
def test_any_reasoning_gym_task_is_split(task):
    train = task_source(task, seed=0, size=1000, split="train")
    held_out = task_source(task, seed=5, size=50, split="test")
    assert keys(train) & keys(held_out) == set()
    assert held_out[0].score(held_out[0].answer) == 1.0  # the task's own scorer still applies


def test_too_small_problem_space_stops_with_the_fix():
    section = task_section("gcd", kwargs={"max_value": 30})  # 465 unordered pairs in all
    with pytest.raises(ValueError) as error:
        task_pool(section, side="selection")
    message = str(error.value)
    assert "config.task.eval_size=200" in message and "gave only 37" in message
    assert "distinct problems on the selection side" in message
    assert "config.task.kwargs" in message and "config.task.selection_fraction" in message
    assert "\n" not in message
    assert len(task_pool(task_section("gcd", kwargs={"max_value": 30}, eval_size=37),
                         side="selection")) == 37  # fmt: skip


def write_jsonl(path, questions):
    with open(path, "w") as f:
        for i, q in enumerate(questions):
            f.write(json.dumps({"question": q, "answer": f"#### {i}"}) + "\n")


def test_jsonl_sides_are_disjoint_and_cover_the_file(tmp_path):
    path = tmp_path / "data.jsonl"
    write_jsonl(path, [f"What is {i} plus {i}?" for i in range(300)])
    train = JsonlSource(path, split="train")
    held_out = JsonlSource(path, split="held_out")
    selection = JsonlSource(path, split="selection")
    assert keys(held_out) == keys(JsonlSource(path, split="test"))
    assert keys(train) & keys(held_out) == keys(train) & keys(selection) == set()
    assert keys(selection) & keys(held_out) == set()
    assert len(train) + len(selection) + len(held_out) == 300
    assert 10 < len(held_out) < 50 and 10 < len(selection) < 50
    assert keys(train) | keys(held_out) | keys(selection) == keys(JsonlSource(path))
    assert "split='held_out'" in repr(held_out)


def test_jsonl_split_by_a_problem_key(tmp_path):
    path = tmp_path / "pairs.jsonl"
    with open(path, "w") as f:  # "a and b" and "b and a": one problem under the key below
        for a in range(30):
            for b in range(a + 1, 30):
                for x, y in ((a, b), (b, a)):
                    line = {"question": f"gcd of {x} and {y}?", "answer": "1", "pair": [x, y]}
                    f.write(json.dumps(line) + "\n")
    sides = {
        side: JsonlSource(path, split=side, problem_key=pair_key)
        for side in ("train", "selection", "test")
    }
    pairs = {side: {pair_key(ex.metadata) for ex in source} for side, source in sides.items()}
    assert pairs["train"] & pairs["test"] == pairs["train"] & pairs["selection"] == set()
    assert len(sides["test"]) == 2 * len(pairs["test"])  # both orders of a pair on one side
    by_text = JsonlSource(path, split="test")
    assert {pair_key(ex.metadata) for ex in by_text} & pairs["train"]  # text splits twins


def pair_key(record):
    return " ".join(str(n) for n in sorted(record["pair"]))


def test_jsonl_duplicate_questions_are_refused(tmp_path):
    path = tmp_path / "dup.jsonl"
    write_jsonl(path, ["What is 1 + 1?", "What is 2 + 2?", "what is 1  + 1?"])
    with pytest.raises(ValueError, match="line 3 repeats the question of line 1"):
        JsonlSource(path)


def test_calculator_episode_examples_are_split():
    from jaxrl_llm.config import config_for
    from jaxrl_llm.envs.tasks import episode_task

    config = config_for("grpo")
    with config.unlocked():
        config.env.name = "calculator"
        config.task.name = "products"
        config.task.kwargs = ml_collections.ConfigDict({"min_digits": 3, "max_digits": 4})
    task = episode_task(config)
    train = task.examples("train", 0, 500)
    test = task.examples("test", 1_000_003, 50)
    assert keys(train) & keys(test) == set() and distinct_questions(e.question for e in test) == 50


def test_multi_if_train_and_test_conversations_are_disjoint():
    from jaxrl_llm.envs.multi_if import multi_if_examples

    train = multi_if_examples(300, seed=0, split="train")
    test = multi_if_examples(100, seed=0, split="test")
    assert keys(train) & keys(test) == set()


def test_a_split_source_pickles():
    """A two-process run sends the training pool to the generator process."""
    import pickle

    pool = task_source("chain_sum", seed=0, size=100, split="train")
    copy = pickle.loads(pickle.dumps(pool))
    assert [copy[i].question for i in (0, 50, 99)] == [pool[i].question for i in (0, 50, 99)]
