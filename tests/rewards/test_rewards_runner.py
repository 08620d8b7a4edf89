"""RewardRunner: weighted sums, errors and timeouts score 0, are counted, logged once, never block."""

import logging
import threading
import time

import numpy as np
import pytest

from jaxrl_llm.data import Example
from jaxrl_llm.rewards import RewardRunner, format_reward, task_reward

EXAMPLES = [
    Example(f"{a} + {b} =", str(a + b), "hand", i)
    for i, (a, b) in enumerate([(1, 2), (3, 4), (5, 6)])
]
PROMPTS = [e.question for e in EXAMPLES]
# Correct and well formed; correct but three numbers; wrong and well formed.
COMPLETIONS = ["It is 3.", "3 + 4 = 7", "The answer is 10."]


@pytest.fixture
def release():
    """An event that frees the 'hanging' reward threads when the test ends."""
    event = threading.Event()
    yield event
    event.set()


def raises(prompt, completion, example):
    raise KeyError("no such field")


def test_weighted_sum_exact():
    runner = RewardRunner(
        {"task": task_reward, "format": format_reward}, weights={"task": 1.0, "format": 0.25}
    )
    out = runner(PROMPTS, COMPLETIONS, EXAMPLES)
    np.testing.assert_array_equal(out.per_function["task"], np.array([1.0, 1.0, 0.0], np.float32))
    np.testing.assert_array_equal(out.per_function["format"], np.array([1.0, 0.0, 1.0], np.float32))
    np.testing.assert_array_equal(out.total, np.array([1.25, 1.0, 0.25], np.float32))
    assert out.total.dtype == np.float32 and out.total.shape == (3,)
    assert out.num_errors == {"task": 0, "format": 0} and out.num_timeouts == {
        "task": 0,
        "format": 0,
    }
    assert out.metrics() == {
        "reward/total": pytest.approx(2.5 / 3),
        "reward/task": pytest.approx(2 / 3),
        "reward/task/errors": 0.0,
        "reward/task/timeouts": 0.0,
        "reward/format": pytest.approx(2 / 3),
        "reward/format/errors": 0.0,
        "reward/format/timeouts": 0.0,
    }


def test_raising_hanging_and_normal_rewards(release, caplog):
    def hangs(prompt, completion, example):
        release.wait(10.0)  # sleeps 10 s unless the test releases it
        return 1.0

    runner = RewardRunner(
        {"task": task_reward, "raises": raises, "hangs": hangs},
        weights=[1.0, 2.0, 3.0],
        timeout_s=0.2,
    )
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="jaxrl_llm.rewards.runner"):
        out = runner(PROMPTS, COMPLETIONS, EXAMPLES)
        again = runner(PROMPTS, COMPLETIONS, EXAMPLES)
    elapsed = time.monotonic() - start
    # Three hanging calls per batch, up to 4 at once: each batch waits about one 0.2 s limit.
    assert elapsed < 3.0, f"a hanging reward blocked the runner for {elapsed:.1f} s"
    for result in (out, again):
        np.testing.assert_array_equal(result.per_function["task"], [1.0, 1.0, 0.0])
        np.testing.assert_array_equal(result.per_function["raises"], [0.0, 0.0, 0.0])
        np.testing.assert_array_equal(result.per_function["hangs"], [0.0, 0.0, 0.0])
        np.testing.assert_array_equal(result.total, [1.0, 1.0, 0.0])
        assert result.num_errors == {"task": 0, "raises": 3, "hangs": 0}
        assert result.num_timeouts == {"task": 0, "raises": 0, "hangs": 3}
    # Logged once per (reward, kind) over both batches, with the exception type.
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert sum("'raises' raised KeyError" in m for m in messages) == 1
    assert sum("'hangs' ran past its 0.2 s limit" in m for m in messages) == 1
    assert runner.num_abandoned_alive == 6
    release.set()
    for _ in range(100):
        if runner.num_abandoned_alive == 0:
            break
        time.sleep(0.01)
    assert runner.num_abandoned_alive == 0


def test_stuck_call_does_not_block_others_with_one_worker(release):
    def hangs_on_first(prompt, completion, example):
        if example.index == 0:
            release.wait(10.0)
        return 0.5

    runner = RewardRunner([hangs_on_first], timeout_s=0.2, max_concurrency=1)
    start = time.monotonic()
    out = runner(PROMPTS, COMPLETIONS, EXAMPLES)
    assert time.monotonic() - start < 2.0
    np.testing.assert_array_equal(out.per_function["hangs_on_first"], [0.0, 0.5, 0.5])
    assert out.num_timeouts == {"hangs_on_first": 1}


def test_bad_return_values_count_as_errors():
    values = iter([None, float("nan"), "high"])

    def bad(prompt, completion, example):
        return next(values)

    out = RewardRunner([bad, task_reward], timeout_s=None)(PROMPTS, COMPLETIONS, EXAMPLES)
    np.testing.assert_array_equal(out.per_function["bad"], [0.0, 0.0, 0.0])
    assert out.num_errors == {"bad": 3, "task_reward": 0}
    np.testing.assert_array_equal(out.total, [1.0, 1.0, 0.0])


def test_inline_mode_runs_in_the_calling_thread():
    threads = []

    def where(prompt, completion, example):
        threads.append(threading.current_thread())
        return 1.0

    out = RewardRunner({"where": where}, timeout_s=None)(PROMPTS, COMPLETIONS, EXAMPLES)
    assert threads == [threading.current_thread()] * 3
    np.testing.assert_array_equal(out.total, [1.0, 1.0, 1.0])


def test_argument_errors():
    with pytest.raises(ValueError, match="two reward functions are named 'raises'"):
        RewardRunner([raises, raises])
    with pytest.raises(
        ValueError, match=r"missing \['format'\].*'formt' is not a reward.*'format'"
    ):
        RewardRunner(
            {"task": task_reward, "format": format_reward}, weights={"task": 1.0, "formt": 1.0}
        )
    with pytest.raises(ValueError, match="1 weights for 2 reward functions"):
        RewardRunner([task_reward, format_reward], weights=[1.0])
    with pytest.raises(ValueError, match="timeout_s=0"):
        RewardRunner([task_reward], timeout_s=0)
    with pytest.raises(ValueError, match="no reward functions"):
        RewardRunner({})
    with pytest.raises(TypeError, match="not callable"):
        RewardRunner({"x": 3})
    with pytest.raises(ValueError, match="2 prompts, 3 completions and 3 examples"):
        RewardRunner([task_reward])(PROMPTS[:2], COMPLETIONS, EXAMPLES)


def test_empty_batch():
    out = RewardRunner([task_reward])([], [], [])
    assert out.total.shape == (0,) and out.metrics()["reward/total"] == 0.0
