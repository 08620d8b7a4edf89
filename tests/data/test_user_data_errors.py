"""Bad user data stops with one line naming the file (and line) and the fix."""

import json

import pytest

from jaxrl_llm.config import config_for, make_tiny, validate_config
from jaxrl_llm.data import load_user_data, task_pool, write_prompts
from tests.data.test_user_data import rows, section


def write_lines(path, objects):
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return path


def load_error(tmp_path, objects, error=ValueError, **fields):
    path = write_lines(tmp_path / "bad.jsonl", objects)
    with pytest.raises(error) as raised:
        load_user_data(section(path, **fields))
    message = str(raised.value)
    assert "\n" not in message
    return path, message


def test_line_without_the_prompt_column_names_its_line(tmp_path):
    objects = rows(3)
    objects[2] = {"question": "What?", "answer": 1}
    path, message = load_error(tmp_path, objects)
    assert message.startswith(f"{path}:3: no prompt column 'prompt'")
    assert "config.task.data.prompt_column" in message and "['answer', 'question']" in message


def test_empty_file(tmp_path):
    path, message = load_error(tmp_path, [])
    assert message == (
        f"{path} holds no prompt rows (config.task.data.train); write one JSON object a line."
    )


def test_duplicate_prompts_are_refused_with_both_lines(tmp_path):
    objects = rows(5) + [{"prompt": "  what is 1 +  1? ", "answer": 2}]
    path, message = load_error(tmp_path, objects)
    assert message.startswith(f"{path}:6 repeats the prompt of {path}:2 (1 repeated prompt(s)")
    assert "keep one row per prompt" in message


def test_prompt_in_both_train_and_held_out_files_is_a_repeat(tmp_path):
    train = write_prompts(rows(5), tmp_path / "train.jsonl")
    held = write_prompts(rows(2, start=4), tmp_path / "held.jsonl")
    with pytest.raises(ValueError, match=f"^{held}:1 repeats the prompt of {train}:5 "):
        load_user_data(section(train, held))


def test_held_out_row_sharing_a_train_rows_key_is_refused(tmp_path):
    train = write_prompts([{**r, "k": str(r["answer"])} for r in rows(5)], tmp_path / "t.jsonl")
    held = write_prompts([{"prompt": "Two plus two?", "answer": 4, "k": "4"}], tmp_path / "h.jsonl")
    with pytest.raises(ValueError, match=f"^{held}:1 has the 'k' '4' of {train}:3: a held-out"):
        load_user_data(section(train, held, data={"key_column": "k"}))


@pytest.mark.parametrize(
    "prompt, expected",
    [
        ([{"role": "tool", "content": "5"}, {"role": "user", "content": "?"}], "role 'tool'"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "2"}], "ends with"),
        ([{"role": "user", "content": "hi"}, {"role": "system", "content": "S"}], "put it first"),
        ([{"role": "user", "content": 3}], "a string 'content'"),
        ([], "non-empty list"),
    ],
)
def test_bad_chat_messages(tmp_path, prompt, expected):
    path, message = load_error(tmp_path, [*rows(2), {"prompt": prompt, "answer": 1}])
    assert message.startswith(f"{path}:3: ") and expected in message


def test_answers_in_some_rows_only(tmp_path):
    path, message = load_error(tmp_path, [*rows(2), {"prompt": "no answer?"}])
    assert message.startswith(f"{path}:3: no answer column 'answer', which {path}:1 has")
    assert "config.rewards.task_weight=0" in message


def test_missing_file_names_the_field(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=f"^config.task.data.train='{missing}': no such"):
        load_user_data(section(missing))
    with pytest.raises(FileNotFoundError, match="^config.task.data.held_out="):
        load_user_data(section(write_prompts(rows(), tmp_path / "ok.jsonl"), missing))


def test_unreadable_parquet(tmp_path):
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really parquet")
    with pytest.raises(ValueError) as raised:
        load_user_data(section(tmp_path / "broken.parquet"))
    message = str(raised.value)
    assert message.startswith(f"config.task.data.train='{tmp_path}/broken.parquet': not a readable")
    assert "config.task.data.format" in message and "\n" not in message


def test_unknown_extension_and_dataset_dict_without_split(tmp_path):
    (tmp_path / "p.csv").write_text("prompt,answer\n")
    with pytest.raises(ValueError, match="cannot tell the format of .*p.csv"):
        load_user_data(section(tmp_path / "p.csv"))
    import datasets

    one = datasets.Dataset.from_list(rows(3))
    datasets.DatasetDict({"train": one, "test": one}).save_to_disk(tmp_path / "d")
    with pytest.raises(ValueError, match=r"splits \['train', 'test'\]; name one as '.*d:train'"):
        load_user_data(section(tmp_path / "d"))


def test_empty_side_names_the_file_and_the_share(tmp_path):
    path = write_prompts(rows(3), tmp_path / "few.jsonl")
    sides = load_user_data(section(path)).sides
    empty = next(name for name, side in zip(sides._fields, sides, strict=True) if not side)
    field = {"test": "held_out_fraction", "selection": "selection_fraction"}.get(empty, "")
    with pytest.raises(ValueError, match=f"^{path}: no question of its 3 lies on the {empty} side"):
        task_pool(section(path), side=empty, seed=0)
    with pytest.raises(ValueError, match=field):
        task_pool(section(path), side=empty, seed=0)


def test_write_prompts_row_without_prompt(tmp_path):
    with pytest.raises(ValueError, match=r"^write_prompts: row 1 has no 'prompt' column"):
        write_prompts([{"prompt": "a"}, {"text": "b"}], tmp_path / "w.jsonl")
    assert not list(tmp_path.iterdir())  # nothing half written
    with pytest.raises(TypeError, match=r"row 0 column 'x' holds a set"):
        write_prompts([{"prompt": "a", "x": {1}}], tmp_path / "w.jsonl")


def _config(path, **task_data):
    config = make_tiny(config_for("grpo"))
    config.task.name = "my_sums"
    config.task.data.train = str(path)
    config.task.data.update(task_data)
    return config


def test_config_validation_on_user_data(tmp_path):
    path = write_prompts(rows(100), tmp_path / "p.jsonl")
    validate_config(_config(path))  # a task name that is no preset labels the data
    no_answers = write_prompts([{"prompt": r["prompt"]} for r in rows(100)], tmp_path / "q.jsonl")
    with pytest.raises(ValueError, match="has no answer column 'answer': .*task_weight=0"):
        validate_config(_config(no_answers))
    config = _config(no_answers)
    config.rewards.task_weight = 0.0
    validate_config(config)
    with pytest.raises(ValueError, match="config.task.data.format='csv' must be one of"):
        validate_config(_config(path, format="csv"))
    config = _config(path)
    config.task.data.train = ""
    config.task.data.held_out = str(path)
    with pytest.raises(
        ValueError, match="config.task.data.held_out=.* needs config.task.data.train"
    ):
        validate_config(config)
