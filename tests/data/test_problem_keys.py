"""Problem keys: twins of a problem (the same up to the task's symmetry) share one side."""

import logging
from decimal import Decimal

import pytest
import reasoning_gym
import sympy

from jaxrl_llm.data import reasoning_gym_source, task_pool, task_source
from jaxrl_llm.data.presets import PRESETS, resolve_task
from jaxrl_llm.data.problem_keys import (
    chain_key,
    equation_key,
    problem_key_for,
    register_problem_key,
)
from jaxrl_llm.data.split import check_side, check_side_fractions, side_of
from tests.data.helpers import task_section


def entry(task, **metadata):
    return {"question": "", "answer": metadata.pop("answer", ""), "metadata": metadata}


def test_hand_made_keys():
    gcd = problem_key_for("gcd")
    assert gcd(entry("gcd", numbers=[12, 18])) == gcd(entry("gcd", numbers=[18, 12])) == "12 18"
    assert chain_key("7 - 3") == "(+7 -3)" and chain_key("3 - 7") == "(+3 -7)"
    assert chain_key("7 + 3") == chain_key("3 + 7") == "(+3 +7)"
    assert chain_key("5 - -3") == chain_key("5 + 3")  # subtracting a negative number adds it
    assert chain_key("12 * 7") == chain_key("7 * 12") == "(12 * 7)"
    assert chain_key("1.50 - 0.2") == "(+1.5 -0.2)" and chain_key("(1 + 2)") is None
    # left to right, as basic_arithmetic's generator answers: 3 + 2 * 3 = 15 = 2 + 3 * 3
    assert chain_key("3 + 2 * 3") == chain_key("2 + 3 * 3") == "((+2 +3) * 3)"
    assert chain_key("2 * 3 + 3") == "(+(2 * 3) +3)"
    arithmetic = problem_key_for("basic_arithmetic")
    assert arithmetic(entry("b", expression="3 + 2 * 3", answer="15")) == "((+2 +3) * 3)"
    # an answer by precedence (the generator with parentheses): the expression's text
    assert arithmetic(entry("b", expression="3 + 2 * 3", answer="9")) == "3 + 2 * 3"
    equations = problem_key_for("simple_equations")
    x = entry("simple_equations", equation="x + 5 = 12", variable="x")
    y = entry("simple_equations", equation="y + 5 = 12", variable="y")
    assert equations(x) == equations(y) == "+5 +x0 = 12"
    assert equation_key("1 - m = -4", ["m"]) == equation_key("-y + 1 = -4", ["y"])
    assert equation_key("x - 5 = 2", ["x"]) != equation_key("5 - x = 2", ["x"])
    letters = problem_key_for("letter_counting")
    assert letters(entry("l", target_letter="e", span=["Tree", "bee"])) == "e: bee tree"
    assert problem_key_for("count_bits")(entry("c", number=3459)) == "3459"
    assert problem_key_for("no_such_task") is None


def test_every_preset_has_a_key():
    for name, preset in PRESETS.items():
        assert (problem_key_for(name) or problem_key_for(preset.task)) is not None, name


def sympy_chain(expression):
    """An independent reference of a left-to-right + - * chain: its numbers as sympy symbols
    (sympy orders the terms of a sum and the factors of a product)."""
    tokens = expression.split()
    value = term_of(tokens[0])
    for op, token in zip(tokens[1::2], tokens[2::2], strict=True):
        term = term_of(token)
        value = value + term if op == "+" else value - term if op == "-" else value * term
    return str(value)


def term_of(token):
    number = Decimal(token)
    return sympy.Symbol(f"n{abs(number).normalize()}") * (-1 if number < 0 else 1)


def repeats_a_number(expression):
    numbers = [abs(Decimal(t)) for t in expression.split()[::2]]
    return len(set(numbers)) < len(numbers)  # x - x would cancel in the sympy reference


def reference(task, e):
    """The problem up to the task's symmetry, computed apart from jaxrl_llm's keys (None: skip)."""
    meta = e["metadata"]
    if task in ("gcd", "lcm"):
        return tuple(sorted(meta["numbers"]))
    if task == "count_bits":
        return meta["n"]
    if task == "letter_counting":
        return meta["target_letter"], tuple(sorted(w.lower() for w in meta["span"]))
    if task == "simple_equations":
        x = sympy.Symbol("x")
        left, right = meta["equation"].split("=")
        names = {meta["variable"]: x}
        return str(sympy.sympify(left, locals=names)), str(sympy.sympify(right, locals=names))
    expression = meta["expression"]
    return None if repeats_a_number(expression) else sympy_chain(expression)


# (raw entries scanned, training pool size) per preset: twins enough, in about a second
# (sympy's parser makes simple_equations' reference the slow one).
SIZES = {"simple_equations": (800, 800)}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_no_evaluated_problem_on_the_train_side(name):
    task, kwargs = resolve_task(name)
    key = problem_key_for(name) or problem_key_for(task)
    # counted with reasoning-gym directly: every twin group of the raw stream is on one side
    raw_size, train_size = SIZES.get(name, (6000, 2000))
    raw = reasoning_gym.create_dataset(task, seed=0, size=raw_size, **kwargs)
    groups: dict = {}
    for e in raw:
        ref = reference(task, e)
        if ref is not None:
            groups.setdefault(ref, []).append(e)
    twins = [g for g in groups.values() if len({e["question"] for e in g}) > 1]
    assert all(len({side_of(key(e)) for e in group}) == 1 for group in groups.values())
    if name not in ("count_bits",):  # a number has no twin; every other preset's space does
        assert twins, name
        # by text, twins do land on two sides: the check above can fail
        if name not in ("letter_counting", "decimal_chain_sum", "chain_sum_steps"):
            assert any(len({side_of(e["question"]) for e in group}) > 1 for group in twins)
    # the sets a run draws: 200 distinct problems on each evaluated side, none trained on
    section = task_section(name, train_size=train_size)
    sets = {side: task_pool(section, side=side) for side in ("test", "selection")}
    keys = {side: {key(ex.metadata) for ex in source} for side, source in sets.items()}
    assert len(keys["test"]) == len(keys["selection"]) == 200
    assert keys["test"] & keys["selection"] == set()
    pool = [ex.metadata for ex in task_pool(section, side="train", seed=0)]
    assert {key(e) for e in pool} & (keys["test"] | keys["selection"]) == set()
    # and no evaluated problem has a twin in the pool by the reference either
    references = {reference(task, e) for e in pool} - {None}
    evaluated = {reference(task, ex.metadata) for source in sets.values() for ex in source}
    assert references & evaluated == set()


def test_a_task_without_a_key_falls_back_to_text_once(caplog, monkeypatch):
    monkeypatch.setattr(reasoning_gym_source, "_WARNED_TEXT_SPLIT", set())
    with caplog.at_level(logging.WARNING):
        first = task_source("spell_backward", seed=0, size=20, split="test")
        task_source("spell_backward", seed=1, size=20, split="train")
        task_source("spell_backward", seed=1, size=20, split="train", split_by="text")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "'spell_backward'" in lines[0] and "falls back to the question text" in lines[0]
    assert first.key_of(0) == first[0].question
    assert all(side_of(ex.question) == "test" for ex in first)


def test_a_registered_key_splits_its_task(monkeypatch):
    monkeypatch.setattr(reasoning_gym_source, "_WARNED_TEXT_SPLIT", set())
    by_word = register_problem_key("spell_backward", spell_backward_key)
    try:
        source = task_source("spell_backward", seed=0, size=30, split="selection")
        assert all(side_of(by_word(ex.metadata)) == "selection" for ex in source)
        assert source.key_of(3) == by_word(source[3].metadata)
    finally:
        from jaxrl_llm.data import problem_keys

        problem_keys._KEYS.pop("spell_backward")


def spell_backward_key(e):
    return e["metadata"]["word"].casefold()


def test_split_by_text_is_the_old_split():
    by_text = task_source("gcd", seed=0, size=50, split="test", split_by="text")
    assert all(side_of(ex.question) == "test" for ex in by_text)
    with pytest.raises(ValueError, match=r"config.task.split_by='words' must be one of"):
        task_source("gcd", seed=0, size=5, split="test", split_by="words")


def test_fraction_validation_names_the_field():
    prefix = "config.task."
    with pytest.raises(ValueError, match=r"^config.task.held_out_fraction=0.0 must lie"):
        check_side_fractions(0.0, 0.1, prefix=prefix)
    with pytest.raises(ValueError, match=r"^config.task.selection_fraction=1.0 must lie"):
        check_side_fractions(0.1, 1.0, prefix=prefix)
    with pytest.raises(ValueError, match=r"held_out_fraction \+ config.task.selection_fraction"):
        check_side_fractions(0.5, 0.5, prefix=prefix)
    assert check_side_fractions(0.2, 0.3) == (0.2, 0.3)


def test_config_validation_refuses_bad_fractions():
    from jaxrl_llm.config import config_for, validate_config

    config = config_for("grpo")
    with config.unlocked():
        config.task.selection_fraction = 0.95
    with pytest.raises(ValueError, match=r"^config.task.held_out_fraction \+ config.task.sel"):
        validate_config(config)


def test_held_out_is_an_alias_of_test():
    assert check_side("held_out") == check_side("test") == "test"
    section = task_section("chain_sum", eval_size=20)
    old = [ex.question for ex in task_pool(section, side="held_out")]
    assert old == [ex.question for ex in task_pool(section, side="test")]
    # a section written before the selection side existed gets its defaults
    del section["selection_fraction"], section["split_by"]
    assert [ex.question for ex in task_pool(section, side="held_out")] == old
