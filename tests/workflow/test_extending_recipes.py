"""docs/extending.md's recipes, built from the page's own code blocks so the two cannot drift.

Each `# file: <name>` block is written into a temporary folder as printed and imported the way
`--import` imports a user's module (its folder on `sys.path`); the recipe's own tests (its
`test_*.py` block) run, then a tiny run trains with it through `jaxrl_llm.train(...,
imports=[...])`, as `python -m jaxrl_llm.main --import` does. Each `# excerpt: <file>` block's
lines are found in that library file, in order: a model family edits library files, so its
recipe shows them as they stand and its test block runs on a family that exists.
"""

import json
import os
import re
import sys

import numpy as np
import pytest

import jaxrl_llm
from jaxrl_llm.algorithms import collected, make
from jaxrl_llm.config import config_for, make_tiny
from jaxrl_llm.config_files import config_from_file
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.runners import EpisodePlayer, SingleTurnSampler
from jaxrl_llm.user_imports import import_all, import_module_or_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "extending.md")
HEADER = re.compile(r"# (file|excerpt): (\S+)\n")
# The files of each recipe, in the order the page gives them.
RECIPES = {
    "algorithm": ["answer_tokens.py", "concise_pg.py", "concise_pg_tiny.py", "test_concise_pg.py"],
    "environment": ["echo_task.py", "echo_tiny.py", "test_echo_task.py"],
    "model family": ["test_family_tiny.py"],
}
EXCERPTS = [
    "jaxrl_llm/models/config.py",
    "jaxrl_llm/models/gguf_loader.py",
    "jaxrl_llm/models/hf.py",
]
TINY_RUN = {"train.num_steps": 1, "eval.before": False, "eval.after": False}


def _blocks() -> list[tuple[str, str, str]]:
    """(kind, name, code) of every Python block of the page."""
    with open(DOC) as f:
        text = f.read()
    blocks = []
    for code in re.findall(r"```python\n(.*?)```", text, re.S):
        header = HEADER.match(code)
        assert header, (
            f"docs/extending.md: a Python block without '# file:' or '# excerpt:':\n{code}"
        )
        blocks.append((header.group(1), header.group(2), code))
    return blocks


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A folder for a recipe's files; what importing them adds to `sys.path` and
    `sys.modules` is undone afterwards (their registrations stay, as a re-run would replace
    them)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def _write(folder, recipe: str) -> None:
    files = {name: code for kind, name, code in _blocks() if kind == "file"}
    for name in RECIPES[recipe]:
        (folder / name).write_text(files[name])


def _run_tests(path: str, *only: str) -> list[str]:
    """Calls the `test_*` functions of the module at `path` (imported like `--import`), or
    those of `only`; returns their names."""
    module = import_module_or_file(path)
    tests = [name for name in vars(module) if name.startswith("test_")]
    for name in only or tests:
        getattr(module, name)()
    return tests


def test_every_block_belongs_to_a_recipe():
    blocks = _blocks()
    assert [name for kind, name, _ in blocks if kind == "file"] == [
        name for names in RECIPES.values() for name in names
    ]
    assert [name for kind, name, _ in blocks if kind == "excerpt"] == EXCERPTS


def test_the_excerpts_are_the_library_as_it_stands():
    for kind, name, code in _blocks():
        if kind != "excerpt":
            continue
        with open(os.path.join(ROOT, name)) as f:
            source = [line.strip() for line in f]
        at = 0
        for line in code.splitlines()[1:]:
            line = re.sub(r"\s+# .*$", "", line).strip()  # the page's comments may add words
            if line in ("", "..."):
                continue
            assert line in source[at:], f"{name}: {line!r} is not there (after line {at})"
            at = source.index(line, at) + 1


def test_a_new_collected_field_is_files_alone(user_folder):
    """Recipe (a): the field's module and the algorithm's import as --import would, their
    tests pass, and both collectors accept the algorithm (no runner lists the field)."""
    _write(user_folder, "algorithm")
    import_module_or_file(str(user_folder / "concise_pg.py"))
    assert _run_tests(str(user_folder / "test_concise_pg.py")) == [
        "test_the_field_has_one_row_per_sample",
        "test_tokens_over_the_budget_cost_reward",
    ]
    field = collected.collected_fields()["answer_tokens"]
    assert field.request_type is sys.modules["answer_tokens"].AnswerTokens
    config = config_from_file(str(user_folder / "concise_pg_tiny.py"))
    algorithm = make(config)
    SingleTurnSampler.check(algorithm)
    EpisodePlayer.check(algorithm)


def _tiny_run(folder, config, imports=()) -> tuple[dict, dict]:
    """`jaxrl_llm.train` of `config` (a config or a file) for one step in `folder`/run, with
    `imports` as --import; its summary and its step's metrics row."""
    workdir = str(folder / "run")
    summary = jaxrl_llm.train(config, workdir, overrides=TINY_RUN, imports=imports, progress=False)
    [row] = [r for r in read_metrics(workdir) if "train/rows" in r]
    assert summary["steps"] == 1 and row["train/rows"] == 8 and np.isfinite(row["train/loss"])
    return summary, row


def test_the_algorithm_recipe_trains_a_tiny_run(user_folder):
    """Recipe (a) end to end: the served field reaches make_batch in a real run."""
    _write(user_folder, "algorithm")
    module = str(user_folder / "concise_pg.py")
    summary, row = _tiny_run(user_folder, str(user_folder / "concise_pg_tiny.py"), [module])
    assert summary["algorithm"] == "concise_pg"
    # the share of rows over their budget, computed from the served answer_tokens field
    assert 0.0 <= row["algo/over_budget"] <= 1.0
    with open(user_folder / "run" / "imports.json") as f:
        assert json.load(f) == [module]


def test_an_environment_is_files_alone(user_folder):
    """Recipe (b): the task registers from its file, its tests pass, its config validates."""
    _write(user_folder, "environment")
    import_module_or_file(str(user_folder / "echo_task.py"))
    assert _run_tests(str(user_folder / "test_echo_task.py")) == [
        "test_a_repeated_question_earns_the_reward",
        "test_the_config_is_checked_with_the_tasks_own_rule",
    ]
    config = config_from_file(str(user_folder / "echo_tiny.py"))
    assert config.env.name == "echo" and config.env.max_turns == 1


def test_the_environment_recipe_trains_a_tiny_run(user_folder):
    _write(user_folder, "environment")
    module = str(user_folder / "echo_task.py")
    _, row = _tiny_run(user_folder, str(user_folder / "echo_tiny.py"), [module])
    assert row["episode/turns"] == 1.0


def test_episodes_serve_a_registered_field_too(user_folder):
    """Recipes (a) and (b) together: the episode player serves the algorithm's field. Echo's
    gold answers are empty (0 tokens), so every episode is over its budget."""
    _write(user_folder, "algorithm")
    _write(user_folder, "environment")
    import_all([str(user_folder / "concise_pg.py"), str(user_folder / "echo_task.py")])
    config = sys.modules["echo_task"].echo_config(make_tiny(config_for("concise_pg")))
    with config.unlocked():
        config.env.max_turn_tokens, config.env.max_episode_tokens = 8, 64
    summary, row = _tiny_run(user_folder, config)
    assert summary["algorithm"] == "concise_pg"
    assert row["episode/turns"] == 1.0 and row["algo/over_budget"] == 1.0


def test_the_model_family_config_survives_config_json(user_folder):
    """Recipe (c): its test block's config round trip, on the worked example (Gemma 3)."""
    _write(user_folder, "model family")
    assert _run_tests(
        str(user_folder / "test_family_tiny.py"), "test_the_config_survives_config_json"
    ) == ["test_forward_equals_prefill_then_decode", "test_the_config_survives_config_json"]


def test_the_model_family_test_runs_as_printed(user_folder):
    """Recipe (c): every test of its block, the tiny config's forward and decode included."""
    _write(user_folder, "model family")
    assert len(_run_tests(str(user_folder / "test_family_tiny.py"))) == 2
