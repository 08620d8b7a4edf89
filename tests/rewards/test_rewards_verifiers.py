"""Reward functions on hand-worked completions, end to end from completion text to score."""

import functools
import json

import pytest

from jaxrl_llm.data import Example, JsonlSource, ReasoningGymSource
from jaxrl_llm.rewards import accuracy, format_reward, math_verify_reward, task_reward

PROMPT = "<rendered prompt>"


@pytest.fixture(scope="module")
def chain_sum():
    # Example 1 of this seed is "99 - 28 =" (reference "71"), example 3 is "72 + 42 =" ("114").
    return ReasoningGymSource("chain_sum", seed=42, size=10, max_terms=2, max_digits=2)


def test_chain_sum_correct_and_incorrect_through_the_whole_path(chain_sum):
    ex = chain_sum[1]
    assert ex.question.endswith("99 - 28 =") and ex.answer == "71"
    # completion -> extraction (last number) -> chain_sum's own scorer
    assert task_reward(PROMPT, "99 - 28 = 71.", ex) == 1.0
    assert task_reward(PROMPT, "Let me see: 99 minus 28 is 71", ex) == 1.0
    assert task_reward(PROMPT, "<answer>71</answer> (I checked: 28 + 71 = 99)", ex) == 1.0
    assert task_reward(PROMPT, "99 - 28 = 72", ex) == 0.0
    assert task_reward(PROMPT, "The answer is 71 or maybe 70", ex) == 0.0  # the last number counts
    assert task_reward(PROMPT, "I cannot compute this.", ex) == 0.0
    big = chain_sum[3]
    assert (big.answer, task_reward(PROMPT, "72 + 42 = 114", big)) == ("114", 1.0)


def test_task_reward_without_a_number_scores_the_stripped_completion():
    seen = []

    def scorer(candidate, example):
        seen.append(candidate)
        return float(candidate == example.answer)

    ex = Example("Which colour is the sky?", "blue", "hand", 0, scorer=scorer)
    assert task_reward(PROMPT, "  blue \n", ex) == 1.0
    assert task_reward(PROMPT, "red", ex) == 0.0
    assert seen == ["blue", "red"]


def test_task_reward_gsm8k_jsonl(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(json.dumps({"question": "1,000 pens at $2?", "answer": "2 * 1000\n#### 2,000"}))
    ex = JsonlSource(path)[0]
    assert task_reward(PROMPT, "Revenue is 1,000 * $2 = $2,000.", ex) == 1.0
    assert task_reward(PROMPT, "Revenue is $2,000.00", ex) == 1.0
    assert task_reward(PROMPT, "Revenue is $200.", ex) == 0.0


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("The answer is 7.", 1.0),
        ("7", 1.0),
        ("  -1,234.5  ", 1.0),  # one number
        ("3 + 4 = 7", 0.0),  # three numbers: the final answer is ambiguous
        ("I don't know.", 0.0),  # no number
        ("", 0.0),
        ("The answer is 7. " + "x" * 200, 0.0),  # too long: probably cut off
    ],
)
def test_format_reward_rule(completion, expected):
    assert format_reward(PROMPT, completion, Example("q", "7", "hand", 0)) == expected


def test_format_reward_max_chars():
    short = functools.partial(format_reward, max_chars=5)
    ex = Example("q", "7", "hand", 0)
    assert (short(PROMPT, "7.", ex), short(PROMPT, "it is 7", ex)) == (1.0, 0.0)


def test_math_verify_reward_free_form():
    half = Example("q", "\\frac{1}{2}", "hand", 0)
    assert math_verify_reward(PROMPT, "So the answer is $\\boxed{0.5}$.", half) == 1.0
    assert math_verify_reward(PROMPT, "The answer is $\\frac{2}{4}$", half) == 1.0
    assert math_verify_reward(PROMPT, "The answer is $\\boxed{\\frac{1}{3}}$", half) == 0.0
    assert math_verify_reward(PROMPT, "no idea", half) == 0.0
    assert math_verify_reward(PROMPT, "x = 114", Example("q", "114", "hand", 0)) == 1.0


def test_accuracy():
    assert accuracy([1.0, 0.0, 0.5, 1.0]) == 0.5  # partial credit does not count
    assert accuracy([1.0]) == 1.0
    with pytest.raises(ValueError, match="no scores"):
        accuracy([])


def test_exact_task_reward_gives_no_partial_credit_that_could_be_farmed():
    from jaxrl_llm.data.presets import task_source
    from jaxrl_llm.rewards import exact_task_reward

    ex = next(e for e in task_source("gcd", seed=0, size=50) if e.answer == "3")
    # reasoning-gym's scorer: len(reference) / len(answer) when the reference is a substring.
    assert task_reward(PROMPT, "The GCD is 315.", ex) == pytest.approx(1 / 3)
    assert exact_task_reward(PROMPT, "The GCD is 315.", ex) == 0.0
    assert exact_task_reward(PROMPT, "The GCD is 3.", ex) == 1.0


def test_run_rewards_are_exact_unless_partial_credit_is_configured():
    from jaxrl_llm.config import apply_overrides, config_for
    from jaxrl_llm.data.presets import task_source
    from jaxrl_llm.runners.components import build_rewards

    ex = next(e for e in task_source("gcd", seed=0, size=50) if e.answer == "3")
    for partial, expected in ((False, 0.0), (True, 1 / 3)):
        config = apply_overrides(config_for("grpo"), {"rewards.partial_credit": partial})
        out = build_rewards(config)([PROMPT], ["The GCD is 315."], [ex])
        assert out.per_function["task"][0] == pytest.approx(expected)
