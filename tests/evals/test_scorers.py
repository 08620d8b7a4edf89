"""The held-out scorer registry: names, a user's scorer, and the scorer of an older run."""

import pytest

from jaxrl_llm.config import config_for, validate_config
from jaxrl_llm.data import Example
from jaxrl_llm.evals import SCORERS, HeldOutScorer, get_scorer, register_scorer, scorer_of_run
from jaxrl_llm.evals import scorers as scorers_module


def test_builtin_scorers_read_answers_by_their_rule():
    lcm = Example("Find the Least Common Multiple (LCM) of these numbers: 2, 4", "4", "hand", 0)
    copied = "LCM(2, 4)\nThe LCM(2, 4) is the smallest multiple of"  # ends on a copied input
    assert get_scorer("last_number").correct("", copied, lcm) == 1.0
    assert get_scorer("stated").correct("", copied, lcm) == 0.0
    assert get_scorer("stated").correct("", "The LCM is 4.", lcm) == 1.0
    assert {name: s.cut_completions for name, s in SCORERS.items()} == {
        "stated": "no_answer",
        "stated_cut_scored": "scored",
        "last_number": "scored",
    }


def test_an_unknown_scorer_is_refused_in_one_line_naming_the_field():
    config = config_for("grpo")
    with config.unlocked():
        config.eval.scorer = "stated_answer"
    with pytest.raises(ValueError, match=r"config.eval.scorer='stated_answer' is not a held-out"):
        validate_config(config)
    with pytest.raises(ValueError, match=r"^--scorer='x' is not"):
        get_scorer("x", field="--scorer")


def test_a_users_scorer_is_registered_once_and_checked(monkeypatch):
    monkeypatch.setattr(scorers_module, "_SCORERS", dict(scorers_module._SCORERS))

    def exact_text(prompt, completion, example):
        return float(completion.strip() == example.answer)

    scorer = HeldOutScorer(exact_text, "last_number", "scored", "the whole text")
    register_scorer("exact_text", scorer)
    assert get_scorer("exact_text") is scorer
    with pytest.raises(ValueError, match="registered already"):
        register_scorer("exact_text", scorer)
    register_scorer("exact_text", scorer, replace=True)
    with pytest.raises(TypeError, match="HeldOutScorer"):
        register_scorer("plain", exact_text)
    with pytest.raises(ValueError, match="cut_completions='never'"):
        HeldOutScorer(exact_text, "stated", "never")
    with pytest.raises(ValueError, match="answer_rule"):
        HeldOutScorer(exact_text, "first_number")


def test_a_scorer_runs_time_limited_and_a_hang_scores_zero():
    import time

    def slow(prompt, completion, example):
        time.sleep(5)
        return 1.0

    runner = HeldOutScorer(slow, "stated", "scored").runner(timeout_s=0.05)
    out = runner(["p"], ["c"], [Example("q", "1", "hand", 0)])
    assert out.per_function["task"].tolist() == [0.0] and out.num_timeouts["task"] == 1


def test_the_scorer_of_a_run_written_before_the_field_is_its_training_rule_with_cuts_scored():
    assert scorer_of_run({"eval": {"scorer": "stated"}}) == "stated"
    assert scorer_of_run({"rewards": {"answer_rule": "stated"}}) == "stated_cut_scored"
    assert scorer_of_run({"rewards": {"answer_rule": "last_number"}}) == "last_number"
    assert scorer_of_run({}) == "last_number"
