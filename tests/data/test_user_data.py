"""A user's own prompts (config.task.data): formats, sides, chat prompts, columns, the pool."""

import logging

import datasets
import pytest

from jaxrl_llm.data import (
    load_user_data,
    read_rows,
    render_prompt,
    side_of,
    task_pool,
    write_prompts,
)
from jaxrl_llm.models import Tokenizer
from jaxrl_llm.rewards.chance import task_answer_prior
from jaxrl_llm.rollout.chat import prompt_ids
from tests.data.helpers import task_section
from tests.models.helpers import write_tiny_tokenizer

N = 60


def rows(n=N, start=0):
    return [
        {"prompt": f"What is {i} + {i}?", "answer": 2 * i, "level": i % 3}
        for i in range(start, start + n)
    ]


def section(train, held_out="", **fields):
    data = dict(
        train=str(train), held_out=str(held_out), prompt_column="prompt", answer_column="answer",
        key_column="", format="auto",
    )  # fmt: skip
    data.update(fields.pop("data", {}))
    return task_section("my_sums", data=data, **{"eval_size": 8, **fields})


def test_jsonl_sides_follow_the_hash_rule_and_are_disjoint(tmp_path):
    path = write_prompts(rows(), tmp_path / "p.jsonl")
    task = section(path)
    data = load_user_data(task)
    sides = {s: [e.question for e in getattr(data.sides, s)] for s in data.sides._fields}
    for side, questions in sides.items():
        assert all(side_of(q) == side for q in questions)
    everything = [q for qs in sides.values() for q in qs]
    assert sorted(everything) == sorted(r["prompt"] for r in rows())  # each row on one side
    pool = task_pool(task, side="train", seed=0)
    assert [e.question for e in pool] == sides["train"]  # every train row, file order
    assert [e.index for e in pool] == list(range(len(pool)))
    first = pool[0]
    i = int(first.question.split()[2])
    assert first.answer == str(2 * i) and first.source == "my_sums"
    assert first.metadata == {"prompt": first.question, "answer": 2 * i, "level": i % 3}
    assert first.messages is None and first.score(str(2 * i)) == 1.0


def test_eval_side_draws_eval_size_or_takes_the_whole_side(tmp_path, caplog):
    path = write_prompts(rows(400), tmp_path / "p.jsonl")
    test_side = load_user_data(section(path)).sides.test
    drawn = task_pool(section(path, eval_size=5), side="test")
    assert len(drawn) == 5 and [e.index for e in drawn] == list(range(5))
    assert {e.question for e in drawn} <= {e.question for e in test_side}
    assert drawn == task_pool(section(path, eval_size=5), side="test")  # seeded by eval_seed
    with caplog.at_level(logging.WARNING):
        whole = task_pool(section(path, eval_size=10_000), side="held_out")
    assert whole == test_side
    assert f"evaluating all {len(test_side)}" in caplog.text


def test_key_column_puts_rows_sharing_a_key_on_one_side(tmp_path):
    data = [{"prompt": f"Say {i} in form {f}.", "answer": i, "k": str(i)} for i in range(30)
            for f in range(3)]  # fmt: skip
    loaded = load_user_data(section(write_prompts(data, tmp_path / "k.jsonl"),
                                    data={"key_column": "k"}))  # fmt: skip
    by_key = {}
    for name, side in zip(loaded.sides._fields, loaded.sides, strict=True):
        for e in side:
            by_key.setdefault(e.metadata["k"], set()).add(name)
    assert len(by_key) == 30 and all(len(s) == 1 for s in by_key.values())
    assert all(by_key[k] == {side_of(k)} for k in by_key)


def test_held_out_file_is_the_test_side_and_selection_comes_from_train(tmp_path):
    train = write_prompts(rows(200), tmp_path / "train.jsonl")
    held = write_prompts(rows(20, start=1000), tmp_path / "held.jsonl")
    data = load_user_data(section(train, held))
    assert [e.question for e in data.sides.test] == [r["prompt"] for r in rows(20, start=1000)]
    assert all(side_of(e.question) == "selection" for e in data.sides.selection)
    assert all(side_of(e.question) != "selection" for e in data.sides.train)
    assert len(data.sides.train) + len(data.sides.selection) == 200


@pytest.mark.parametrize("kind", ["parquet", "arrow", "dataset", "dataset_dict", "json_array"])
def test_other_formats_read_the_same_examples(tmp_path, kind):
    reference = load_user_data(section(write_prompts(rows(), tmp_path / "p.jsonl"))).sides
    dataset = datasets.Dataset.from_list(rows())
    if kind == "parquet":
        dataset.to_parquet(str(tmp_path / "p.parquet"))
        spec = tmp_path / "p.parquet"
    elif kind == "json_array":
        (tmp_path / "p.json").write_text(__import__("json").dumps(rows()))
        spec = tmp_path / "p.json"
    elif kind == "dataset_dict":
        datasets.DatasetDict({"train": dataset, "other": dataset}).save_to_disk(tmp_path / "d")
        spec = f"{tmp_path / 'd'}:train"
    else:
        dataset.save_to_disk(tmp_path / "d")
        spec = tmp_path / "d"
        if kind == "arrow":
            spec = next((tmp_path / "d").glob("*.arrow"))
    loaded = load_user_data(section(spec)).sides
    assert loaded == reference  # questions, answers, metadata, sides and indices
    assert read_rows(str(spec))[1].where == f"{spec} row 2"


def test_tfds_file_reads_the_same_examples(tmp_path):
    path = write_prompts(rows(20), tmp_path / "p.jsonl")
    reference = load_user_data(section(path)).sides
    loaded = load_user_data(section(f"tfds:{path}")).sides
    assert [e.question for e in loaded.train] == [e.question for e in reference.train]
    assert [e.answer for e in loaded.test] == [e.answer for e in reference.test]
    assert loaded.train[0].metadata == reference.train[0].metadata


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_tokenizer")
    write_tiny_tokenizer(str(path))
    return Tokenizer.from_hf_directory(str(path))


def test_chat_messages_render_as_the_conversation(tmp_path, tiny_tokenizer):
    shots = [
        {"role": "system", "content": "You add."},
        {"role": "user", "content": "1 + 1?"},
        {"role": "assistant", "content": "2"},
    ]
    data = [
        {"prompt": [*shots, {"role": "user", "content": f"{i} + {i}?"}], "answer": 2 * i}
        for i in range(N)
    ]
    data.append({"prompt": [{"role": "user", "content": "lone"}], "answer": 0})
    sides = load_user_data(section(write_prompts(data, tmp_path / "c.jsonl"))).sides
    lone = next(e for s in sides for e in s if e.question == "lone")  # one user message: its text
    assert lone.messages == ({"role": "user", "content": "lone"},)
    example = next(e for s in sides for e in s if e.question.endswith("7 + 7?"))
    assert example.question == "system: You add.\n\nuser: 1 + 1?\n\nassistant: 2\n\nuser: 7 + 7?"
    texts, ids = prompt_ids(
        tiny_tokenizer, [example], system_prompt="Ignored.", instruction_suffix="!"
    )
    assert texts == [
        "<|im_start|>system\nYou add.<|im_end|>\n<|im_start|>user\n1 + 1?<|im_end|>\n"
        "<|im_start|>assistant\n2<|im_end|>\n<|im_start|>user\n7 + 7?!<|im_end|>\n"
        "<|im_start|>assistant\n"
    ]
    assert ids == tiny_tokenizer.batch_encode(texts)
    # a conversation without a system message gets the configured one
    assert render_prompt(
        tiny_tokenizer, "", system_prompt="S.", messages=lone.messages
    ) == render_prompt(tiny_tokenizer, "lone", system_prompt="S.")


def test_write_prompts_takes_a_dataset_and_numpy_values(tmp_path):
    import numpy as np

    dataset = datasets.Dataset.from_list(rows(5))
    path = write_prompts(dataset, tmp_path / "sub" / "d.jsonl")
    assert [r.values for r in read_rows(path)] == rows(5)
    path = write_prompts(
        [{"prompt": "a", "answer": np.int64(3), "v": np.arange(2)}], tmp_path / "n.jsonl"
    )
    assert read_rows(path)[0].values == {"prompt": "a", "answer": 3, "v": [0, 1]}


def test_chance_prior_counts_the_user_train_side(tmp_path):
    data = [{"prompt": f"Is {i} odd?", "answer": i % 2} for i in range(100)]
    task = section(write_prompts(data, tmp_path / "odd.jsonl"))
    train = load_user_data(task).sides.train
    prior = task_answer_prior(task, seed=0)
    assert prior.num_questions == len(train)
    assert prior.share("1") == pytest.approx(sum(e.answer == "1" for e in train) / len(train))
