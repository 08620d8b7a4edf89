"""Episode tasks are found by name in a registry, as algorithms are: the built-in ones register
from their own modules, an unknown name lists the registered ones, and a task registered from
outside (here, an echo task) passes the same config checks and builds the same way."""

import pytest

from jaxrl_llm.config import config_for, validate_config
from jaxrl_llm.data import Example
from jaxrl_llm.envs import Environment, StepResult, tasks


class _Echo(Environment):
    """One turn: reward 1 when the reply repeats the question."""

    def reset(self, example):
        self.question = example.question
        return [{"role": "user", "content": f"Repeat: {example.question}"}]

    def step(self, reply):
        right = float(reply.strip() == self.question)
        return StepResult([], right, True, info={"correct": right})


def _echo_task(config):
    def examples(split, seed, size):
        return [Example(f"{split} {seed} {i}", "", "echo", i) for i in range(size)]

    return tasks.EpisodeTask("echo", examples, _Echo)


def test_the_built_in_tasks_register_from_their_modules():
    assert {"calculator", "multi_if"} <= set(tasks.names())
    assert tasks.has_own_data("multi_if") and not tasks.has_own_data("calculator")
    assert not tasks.has_own_data("") and not tasks.has_own_data("no_such_task")


def test_an_unknown_task_names_the_registered_ones():
    # Other tests in the same worker may have registered tasks of their own (the extending
    # guide's echo task): the message lists whatever is registered now, sorted.
    registered = ", ".join(sorted(tasks.names()))
    assert "calculator" in registered and "multi_if" in registered
    with pytest.raises(KeyError, match=rf"Did you mean calculator\?.*Registered: {registered}\."):
        tasks.get("calculater")
    config = config_for("grpo")
    with config.unlocked():
        config.env.name = "chess"
    with pytest.raises(ValueError, match=r"config\.env\.name='chess' is not a registered"):
        validate_config(config)


def test_a_task_checks_its_own_fields_when_the_config_is_validated():
    config = config_for("grpo")
    with config.unlocked():
        config.env.name, config.env.tools = "calculator", "calculator,shell"
        config.task.name = "products"
    with pytest.raises(ValueError, match=r"config\.env\.tools='calculator,shell'.*'shell'"):
        validate_config(config)


def test_a_task_registered_outside_the_package_builds_like_a_built_in_one():
    spec = tasks.register("echo_for_tests", make=_echo_task, own_data=True)
    assert tasks.get("echo_for_tests") is spec and "echo_for_tests" in tasks.names()
    assert tasks.has_own_data("echo_for_tests")
    config = config_for("grpo")
    with config.unlocked():
        config.env.name = "echo_for_tests"
    validate_config(config)
    task = tasks.episode_task(config)
    assert [e.question for e in task.examples("test", 3, 2)] == ["test 3 0", "test 3 1"]
    env = task.make_env()
    assert env.reset(task.examples("train", 0, 1)[0]) == [
        {"role": "user", "content": "Repeat: train 0 0"}
    ]
    assert env.step(" train 0 0 ").reward == 1.0
