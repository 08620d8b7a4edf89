"""User rewards in TRL's batch shape: values, weights, columns, names, the skip / stop policies,
the time limit, and every bad input as one line naming the function or field and the fix."""

import functools
import itertools
import logging
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from jaxrl_llm.config import apply_overrides, config_for, validate_config
from jaxrl_llm.data import Example
from jaxrl_llm.rewards import (
    BatchReward,
    RewardColumnError,
    RewardFunctionError,
    RewardRunner,
    check_reward_columns,
    load_reward_function,
    task_reward,
    user_rewards,
)
from jaxrl_llm.rewards.user import example_columns, fill_skipped
from jaxrl_llm.roles import RewardRole
from jaxrl_llm.runners.components import build_rewards

# Two questions, each in a group of two samples (as the sampler lays a batch out).
QUESTIONS = [
    Example("2 + 3 =", "5", "hand", 0, metadata={"question": "2 + 3 =", "answer": 5, "level": 1}),
    Example("7 - 4 =", "3", "hand", 1, metadata={"question": "7 - 4 =", "answer": 3, "level": 2}),
]
EXAMPLES = [e for e in QUESTIONS for _ in range(2)]
PROMPTS = [f"<chat>{e.question}</chat>" for e in EXAMPLES]  # rendered: not what users get
COMPLETIONS = ["It is 5.", "6", "3", "It is 3, or 4."]

_module_ids = itertools.count()


@pytest.fixture
def module(tmp_path, monkeypatch):
    """Writes `source` as a fresh importable module; returns its name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        name = f"user_rewards_mod_{next(_module_ids)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    return write


@pytest.fixture
def release():
    """An event that frees the 'hanging' reward threads when the test ends."""
    event = threading.Event()
    yield event
    event.set()


def says_answer(prompts, completions, answer, **columns):
    """1 when the completion contains the reference answer."""
    return [float(a in c) for c, a in zip(completions, answer, strict=True)]


SAYS_ANSWER_SOURCE = """
def says_answer(prompts, completions, answer):
    return [0.0] * len(completions)
"""


def short(prompts, completions):
    """1 for completions under 5 characters."""
    return [float(len(c) < 5) for c in completions]


def runner_of(*fns, on_error="skip", timeout_s=5.0, weights=None):
    rewards, user_weights = user_rewards("", "", list(fns), on_error=on_error)
    return RewardRunner(rewards, weights=weights or user_weights, timeout_s=timeout_s)


def assert_one_line(error: BaseException, *parts: str):
    message = str(error.value if hasattr(error, "value") else error)
    assert "\n" not in message, message
    for part in parts:
        assert part in message, message


# ---- values, weights, columns, names -------------------------------------------------------


def test_batch_rewards_add_to_the_built_ins_with_weights_each_under_its_name():
    rewards, weights = user_rewards("", "0.5,2", [says_answer, short])
    runner = RewardRunner({"task": task_reward, **rewards}, weights={"task": 1.0, **weights})
    out = runner(PROMPTS, COMPLETIONS, EXAMPLES)
    np.testing.assert_array_equal(out.per_function["task"], [1, 0, 1, 0])  # last number
    np.testing.assert_array_equal(out.per_function["says_answer"], [1, 0, 1, 1])
    np.testing.assert_array_equal(out.per_function["short"], [0, 1, 1, 0])
    np.testing.assert_array_equal(out.total, [1.5, 2.0, 3.5, 0.5])
    assert out.num_skipped == {"says_answer": 0, "short": 0}
    metrics = out.metrics()
    assert metrics["reward/says_answer"] == 0.75 and metrics["reward/short"] == 0.5
    assert metrics["reward/says_answer/skipped"] == 0.0 and metrics["reward/short/errors"] == 0.0
    # the reward role (what a run calls) passes the counts on
    assert RewardRole(runner)(PROMPTS, COMPLETIONS, EXAMPLES).num_skipped == out.num_skipped


def test_columns_are_the_records_keys_and_the_reference_aligned_with_the_batch():
    seen = {}

    def everything(prompts, completions, **columns):
        seen.update(prompts=prompts, completions=completions, **columns)
        return [0.0] * len(completions)

    def named_only(prompts, completions, level, missing_ok=None):
        seen["named_only"] = (level, missing_ok)
        return [float(x) for x in level]

    out = runner_of(everything, named_only)(PROMPTS, COMPLETIONS, EXAMPLES)
    assert seen["prompts"] == [e.question for e in EXAMPLES]  # not the rendered chat prompt
    assert seen["completions"] == COMPLETIONS
    # "answer" is the reference text (not the record's raw 5), "level" the record's
    assert seen["answer"] == ["5", "5", "3", "3"] and seen["level"] == [1, 1, 2, 2]
    assert seen["question"] == [e.question for e in EXAMPLES]
    assert seen["named_only"] == ([1, 1, 2, 2], None)  # only the columns it names
    np.testing.assert_array_equal(out.per_function["named_only"], [1, 1, 2, 2])
    records = [
        Example("q", "a", "s", 0, metadata={"prompt": "q", "x": 1}),
        Example("r", "b", "s", 1),
    ]
    assert example_columns(records) == {"x": [1, None], "answer": ["a", "b"]}


def test_build_rewards_reads_config_entries_then_python_callables(module, tmp_path):
    name = module(
        """
        def brevity(prompts, completions, **columns):
            return [1.0 if len(c) < 5 else 0.0 for c in completions]
        """
    )
    (tmp_path / "extra.py").write_text(
        "def cites(prompts, completions, **kw):\n    return [0.5] * len(completions)\n"
    )
    config = apply_overrides(
        config_for("grpo"),
        {
            "rewards.functions": f"{name}:brevity, {tmp_path / 'extra.py'}:cites",
            "rewards.function_weights": "0.5,1,3",
            "rewards.on_error": "stop",
        },
    )
    validate_config(config)
    runner = build_rewards(config, reward_fns=[says_answer])
    assert list(runner.functions) == ["task", "brevity", "cites", "says_answer"]
    assert runner.weights == {"task": 1.0, "brevity": 0.5, "cites": 1.0, "says_answer": 3.0}
    assert runner.functions["brevity"].origin == f"{name}:brevity"
    assert runner.functions["says_answer"].on_error == "stop"
    out = runner(PROMPTS, COMPLETIONS, EXAMPLES)
    np.testing.assert_array_equal(out.per_function["cites"], [0.5] * 4)
    np.testing.assert_array_equal(out.total, [1 + 0 + 0.5 + 3, 0.5 + 0.5, 1 + 0.5 + 0.5 + 3, 3.5])
    # a dict names callables (a lambda, a partial)
    named = build_rewards(config_for("grpo"), reward_fns={"fixed": lambda p, c: [1.0] * len(c)})
    assert list(named.functions) == ["task", "fixed"] and named.weights["fixed"] == 1.0
    # the default config has no user reward
    assert list(build_rewards(config_for("grpo")).functions) == ["task"]


def test_a_file_is_imported_once(tmp_path):
    (tmp_path / "once_rewards.py").write_text(
        "CALLS = []\nCALLS.append(1)\ndef ok(prompts, completions):\n    return [1.0] * len(completions)\n"
    )
    first = load_reward_function(f"{tmp_path}/once_rewards.py:ok")
    assert load_reward_function(f"{tmp_path}/once_rewards.py:ok") is first
    assert first([""], ["5"]) == [1.0] and sys.modules["once_rewards"].CALLS == [1]


# ---- the skip and stop policies ---------------------------------------------------------------


def test_fill_skipped_uses_the_group_then_the_batch_then_0():
    nan = np.nan
    np.testing.assert_array_equal(
        fill_skipped(np.array([1.0, nan, 0.0, 0.5, nan, nan]), list("aabbcc")),
        np.array([1.0, 1.0, 0.0, 0.5, 0.5, 0.5], np.float32),  # c: the batch mean of 1, 0, .5
    )
    np.testing.assert_array_equal(fill_skipped(np.array([nan, nan]), ["a", "b"]), [0.0, 0.0])
    np.testing.assert_array_equal(fill_skipped(np.array([0.25, 1]), ["a", "a"]), [0.25, 1.0])


def test_none_is_no_opinion_the_sample_gets_its_groups_mean_and_is_counted(caplog):
    def unsure(prompts, completions, **columns):
        return [1.0, None, None, 0.5]

    with caplog.at_level(logging.WARNING, logger="jaxrl_llm.rewards.runner"):
        out = runner_of(unsure, on_error="stop")(PROMPTS, COMPLETIONS, EXAMPLES)
    np.testing.assert_array_equal(out.per_function["unsure"], [1.0, 1.0, 0.5, 0.5])
    assert out.num_skipped == {"unsure": 2} and out.num_errors == {"unsure": 0}
    assert not caplog.records  # no opinion is not a failure


@pytest.mark.parametrize(
    ("returned", "what", "filled"),
    [
        ([1.0, 0.0, float("nan"), 1.0], "returned NaN at sample 2", [1.0, 0.0, 1.0, 1.0]),
        (["abc", 0.0, 1.0, 1.0], "returned 'abc' (str) at sample 0", [0.0, 0.0, 1.0, 1.0]),
        ([1.0, float("inf"), 1.0, 0.0], "returned inf at sample 1", [1.0, 1.0, 1.0, 0.0]),
        (np.array([1.0, 0.0, np.nan, 0.5]), "returned NaN at sample 2", [1.0, 0.0, 0.5, 0.5]),
    ],
)
def test_a_bad_value_stops_naming_the_function_and_sample_or_gets_its_groups_mean(
    returned, what, filled, caplog
):
    """Skipped: the bad sample gets the mean of its group's valid values (its group is the
    sample beside it), is counted, and the first one is logged; never a silent 0."""
    fn = _returning(returned)
    with pytest.raises(RewardFunctionError) as e:
        runner_of(fn, on_error="stop")(PROMPTS, COMPLETIONS, EXAMPLES)
    assert_one_line(e, f"reward '{fn.__module__}:{fn.__qualname__}' {what}", "on_error='skip'")
    with caplog.at_level(logging.WARNING, logger="jaxrl_llm.rewards.runner"):
        out = runner_of(fn)(PROMPTS, COMPLETIONS, EXAMPLES)
        runner_of(fn)(PROMPTS, COMPLETIONS, EXAMPLES)
    np.testing.assert_array_equal(out.per_function["fixed"], filled)
    assert out.num_skipped == {"fixed": 1} and out.num_errors == {"fixed": 1}
    assert sum(what in r.getMessage() for r in caplog.records) == 2  # once per runner


def _returning(values):
    def fixed(prompts, completions):
        return values

    return fixed


@pytest.mark.parametrize(
    ("returned", "what"),
    [
        ([1.0, 0.0, 1.0], "returned 3 values for a batch of 4: return one float"),
        (0.5, "returned 0.5 (float) for a batch of 4: return a list of 4 floats"),
        ("1,0,1,0", "returned '1,0,1,0' (str) for a batch of 4"),
        ({"a": 1}, "returned {'a': 1} (dict) for a batch of 4"),
    ],
)
def test_a_wrong_shape_stops_or_skips_the_whole_batch(returned, what):
    fn = _returning(returned)
    with pytest.raises(RewardFunctionError) as e:
        runner_of(fn, on_error="stop")(PROMPTS, COMPLETIONS, EXAMPLES)
    assert_one_line(e, f"reward '{fn.__module__}:_returning.<locals>.fixed' {what}")
    out = runner_of(fn)(PROMPTS, COMPLETIONS, EXAMPLES)
    assert out.num_skipped == {"fixed": 4} and out.num_errors == {"fixed": 4}
    np.testing.assert_array_equal(out.per_function["fixed"], [0.0] * 4)  # counted, adds nothing


def test_a_raising_function_stops_with_its_error_or_is_skipped_and_logged_once(caplog):
    def broken(prompts, completions, answer):
        raise ValueError("cannot parse\nsecond line")

    with pytest.raises(RewardFunctionError) as e:
        runner_of(broken, on_error="stop")(PROMPTS, COMPLETIONS, EXAMPLES)
    assert_one_line(e, "reward '", ".broken' raised ValueError: cannot parse (fix the function")
    assert isinstance(e.value.__cause__, ValueError)
    runner = RewardRunner({"task": task_reward, **user_rewards("", "", [broken])[0]})
    with caplog.at_level(logging.WARNING, logger="jaxrl_llm.rewards.runner"):
        out = runner(PROMPTS, COMPLETIONS, EXAMPLES)
        runner(PROMPTS, COMPLETIONS, EXAMPLES)
    assert out.num_errors == {"task": 0, "broken": 4} and out.num_skipped == {"broken": 4}
    np.testing.assert_array_equal(out.total, out.per_function["task"])  # the task still scores
    assert sum("raised ValueError" in r.getMessage() for r in caplog.records) == 1


def test_a_hanging_function_runs_under_the_time_limit_of_one_batch_call(release):
    def hangs(prompts, completions):
        release.wait(10.0)
        return [1.0] * len(completions)

    start = time.monotonic()
    with pytest.raises(RewardFunctionError) as e:
        runner_of(hangs, on_error="stop", timeout_s=0.2)(PROMPTS, COMPLETIONS, EXAMPLES)
    assert_one_line(e, ".hangs' ran past its 0.2 s limit", "config.rewards.timeout_s")
    out = runner_of(hangs, timeout_s=0.2)(PROMPTS, COMPLETIONS, EXAMPLES)
    assert time.monotonic() - start < 3.0
    assert out.num_timeouts == {"hangs": 4} and out.num_skipped == {"hangs": 4}

    def slow(prompts, completions):  # 0.1 s per batch is within a 0.5 s limit for 4 samples
        time.sleep(0.1)
        return [1.0] * len(completions)

    out = runner_of(slow, timeout_s=0.5)(PROMPTS, COMPLETIONS, EXAMPLES)
    np.testing.assert_array_equal(out.per_function["slow"], [1.0] * 4)
    assert out.num_timeouts == {"slow": 0}


# ---- columns the data lacks ---------------------------------------------------------------


def test_a_missing_column_is_found_on_the_first_example_and_stops_whatever_the_policy():
    def needs_topic(prompts, completions, topic, level=0):
        return [1.0] * len(completions)

    rewards, _ = user_rewards("", "", [needs_topic])
    with pytest.raises(RewardColumnError) as e:
        check_reward_columns({"task": task_reward, **rewards}, QUESTIONS[0])
    assert_one_line(
        e,
        "needs_topic' asks for the column 'topic'",
        "the data's columns: ['question', 'level', 'answer']",
        "add the column to the data, or give the parameter a default",
    )
    with pytest.raises(RewardFunctionError, match="asks for the column 'topic'"):
        runner_of(needs_topic, on_error="skip")(PROMPTS, COMPLETIONS, EXAMPLES)
    check_reward_columns(rewards, Example("q", "a", "s", 0, metadata={"topic": "x"}))


def test_a_per_sample_reward_is_told_apart():
    def per_sample(prompt, completion, example):
        return 1.0

    rewards, _ = user_rewards("", "", [per_sample])
    with pytest.raises(RewardColumnError) as e:
        check_reward_columns(rewards, QUESTIONS[0])
    assert_one_line(e, "column 'example'", "looks like a per-sample reward")


# ---- bad config entries and names ---------------------------------------------------------


def test_a_module_that_does_not_import_is_named_with_its_error(module):
    name = module("import a_package_that_is_not_installed_xyz\n")
    with pytest.raises(ValueError) as e:
        user_rewards(f"{name}:fn")
    assert_one_line(
        e,
        f"config.rewards.functions: '{name}:fn': module '{name}' failed",
        "ModuleNotFoundError: No module named 'a_package_that_is_not_installed_xyz'",
        "PYTHONPATH",
    )
    with pytest.raises(ValueError) as e:
        user_rewards("no_such_module_xyz.rewards:fn")
    assert_one_line(e, "module 'no_such_module_xyz.rewards' failed", "No module named")
    with pytest.raises(RewardFunctionError) as e:
        user_rewards("rewards/mine:fn")
    assert_one_line(e, "rewards/mine is a path but not a .py file", "'rewards/mine.py:fn'")


def test_a_file_that_is_missing_or_fails_is_named(tmp_path):
    with pytest.raises(ValueError) as e:
        user_rewards(f"{tmp_path}/nope.py:fn")
    assert_one_line(e, f"FileNotFoundError: no such file: {tmp_path}/nope.py")
    (tmp_path / "broken_rewards.py").write_text("x = 1 / 0\n")
    with pytest.raises(ValueError) as e:
        user_rewards(f"{tmp_path}/broken_rewards.py:fn")
    assert_one_line(e, "broken_rewards.py' failed: ZeroDivisionError: division by zero")


def test_a_name_not_in_the_module_or_not_callable(module):
    name = module(
        """
        THRESHOLD = 0.5
        def brevity(prompts, completions):
            return [0.0] * len(completions)
        """
    )
    with pytest.raises(RewardFunctionError) as e:
        user_rewards(f"{name}:brevty")
    assert_one_line(e, f"{name} has no 'brevty' (did you mean 'brevity'?")
    with pytest.raises(RewardFunctionError) as e:
        user_rewards(f"{name}:THRESHOLD")
    assert_one_line(e, f"'{name}:THRESHOLD' is a float, not a function", "fn(prompts, completions")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"rewards.functions": "my_rewards.brevity"},
            "config.rewards.functions: 'my_rewards.brevity' is not",
        ),
        (
            {"rewards.functions": "a:b", "rewards.function_weights": "x"},
            "function_weights='x' must be",
        ),
        (
            {"rewards.functions": "a:b,c:d", "rewards.function_weights": "1"},
            "gives 1 weights for 2",
        ),
        ({"rewards.on_error": "ignore"}, "config.rewards.on_error='ignore' must be one of"),
    ],
)
def test_bad_fields_are_refused_by_validation(overrides, message):
    with pytest.raises(ValueError) as e:
        validate_config(apply_overrides(config_for("grpo"), overrides))
    assert_one_line(e, message)


def test_bad_names_and_shapes_of_callables(module):
    with pytest.raises(RewardFunctionError) as e:
        user_rewards("", "", [lambda p, c: [0.0]])
    assert_one_line(e, "would be logged as reward/<lambda>", "pass {name: fn}")

    def task(prompts, completions):
        return [0.0] * len(completions)

    with pytest.raises(RewardFunctionError) as e:
        user_rewards("", "", [task])
    assert_one_line(e, "is named 'task', which the run already logs as reward/task: rename")
    with pytest.raises(RewardFunctionError) as e:
        user_rewards("", "", {"a": says_answer, "b": says_answer, "c": 3})
    assert_one_line(e, "reward 'c' is a int, not a function")
    with pytest.raises(RewardFunctionError) as e:
        user_rewards(f"{module(SAYS_ANSWER_SOURCE)}:says_answer", "", [says_answer])
    assert_one_line(e, "two reward functions are named 'says_answer'", "rename one")
    with pytest.raises(RewardFunctionError) as e:
        user_rewards("", "1,2", [says_answer])
    assert_one_line(e, "gives 2 weights for 1 reward functions")
    with pytest.raises(RewardFunctionError) as e:
        BatchReward(lambda completions: [0.0], name="one_arg")
    assert_one_line(e, "takes 1 positional parameters", "fn(prompts, completions, **columns)")
    with pytest.raises(RewardFunctionError) as e:
        BatchReward(says_answer, on_error="ignore")
    assert_one_line(e, "on_error='ignore'", "must be one of ('skip', 'stop')")
    partial = BatchReward(functools.partial(says_answer, extra=1))
    assert partial.name == "says_answer" and partial.required_columns == ("answer",)


def test_episode_runs_refuse_user_rewards():
    config = apply_overrides(config_for("grpo"), {"env.name": "calculator"})
    with pytest.raises(ValueError) as e:
        build_rewards(config, reward_fns=[says_answer])
    assert_one_line(
        e, "['says_answer'] score single-turn completions", "config.env.name='calculator'"
    )


def test_dynamic_sampling_adds_the_skipped_counts_of_its_rounds():
    from jaxrl_llm.runners.stabilisers import take_groups
    from tests.algorithms.test_stabilisers import fake_generated

    rounds = [fake_generated(r, 4, [1, 0, 1, 1]) for r in range(2)]
    rounds = [
        g._replace(reward_out=g.reward_out._replace(num_skipped={"mine": r + 1}))
        for r, g in enumerate(rounds)
    ]
    picked = take_groups(rounds, [(0, 0), (1, 0)], 2, pad_id=0)
    assert picked.reward_out.num_skipped == {"mine": 3}
