"""The verifier without the known hacks: the "stated" answer rule and the chance correction.

The hack samples are quoted from docs/recipe.md: GRPO on lcm learned to end on an input number
("LCM(2, 4)\\nLCM(2, 4)\\nThe LCM(2, 4) is the smallest multiple of"), and its gcd samples collapsed
onto answering "2". The honest answers are the forms SmolLM2 writes (same file).
"""

import functools

import numpy as np
import pytest

from jaxrl_llm.config import apply_overrides, config_for, validate_config
from jaxrl_llm.data import Example, task_pool, task_source
from jaxrl_llm.rewards import (
    RewardRunner,
    accuracy,
    answer_prior,
    chance_corrected,
    chance_correction,
    exact_task_reward,
    extract_answer,
    extract_stated_number,
    number_key,
    stated_numbers,
    task_reward,
)
from jaxrl_llm.runners.components import build_rewards

PROMPT = "<rendered prompt>"
LCM_HACK = "LCM(2, 4)\nLCM(2, 4)\nThe LCM(2, 4) is the smallest multiple of"  # docs/recipe.md


# The gcd and lcm presets' ranges when these examples were picked (each item depends on its
# index and the range alone).
RANGES = {"gcd": {"max_value": 60}, "lcm": {"max_value": 50}}


def _example(task: str, index: int, question_end: str) -> Example:
    """Example `index` of the task's preset at seed 0 (each item depends on its index alone)."""
    example = task_source(task, seed=0, size=index + 1, overrides=RANGES.get(task))[index]
    assert example.question.endswith(question_end), example.question
    return example


@pytest.fixture(scope="module")
def examples():
    return {
        # "... these numbers: 2, 4" (reference "4": the larger input, since 2 divides 4)
        "lcm_2_4": _example("lcm", 2667, ": 2, 4"),
        "chain_1_7": _example("chain_sum", 289, "1 + 7 ="),  # "8"
        "products_6_9": _example(
            "products", 26, "6 * 9. Give only the result as your final answer."
        ),
        "gcd_12_18": _example("gcd", 487, ": 12, 18. Give only the GCD as your final answer."),
        "gcd_6_12": _example("gcd", 3766, ": 6, 12. Give only the GCD as your final answer."),
        "gcd_30_27": _example("gcd", 4860, ": 30, 27. Give only the GCD as your final answer."),
    }


def _score(completion, example, rule):
    return exact_task_reward(PROMPT, completion, example, rule=rule)


def test_the_lcm_hack_sample_pays_under_the_last_number_rule_and_not_under_stated(examples):
    lcm = examples["lcm_2_4"]
    assert lcm.answer == "4"
    assert _score(LCM_HACK, lcm, "last_number") == 1.0  # the hack of docs/recipe.md
    assert _score(LCM_HACK, lcm, "stated") == 0.0
    assert extract_answer(LCM_HACK, lcm.question, rule="stated") is None
    # Other endings on a copied input with no answer statement do not pay either.
    for echo in ("LCM(2, 4)", "The LCM of 2 and 4", "LCM = 2 * 4", "The LCM(2, 4) is 2 * 4"):
        assert _score(echo, lcm, "stated") == 0.0, echo
    # The same number, stated as the answer, is a claim and is scored as one.
    for stated in ("The LCM of 2 and 4 is 4.", "LCM(2, 4) = 4", "4", "4.", "Answer: 4"):
        assert _score(stated, lcm, "stated") == 1.0, stated


def test_honest_answers_in_smollm2_formats_still_score_1(examples):
    cases = [
        ("chain_1_7", "1 + 7 equals 8."),
        ("products_6_9", "6 * 9 = 54."),
        ("products_6_9", "54"),
        ("products_6_9", "6 * 9 equals 54."),
        ("gcd_12_18", "The GCD of 12 and 18 is 6."),
        ("gcd_30_27", "The GCD of 30 and 27 is simply 3, which is 3."),  # docs/recipe.md
        ("gcd_6_12", "The GCD of 6 and 12 is 6."),  # the answer is an input, stated
        ("gcd_6_12", "6"),  # a bare number is a statement
        # an input after the stated answer: "last_number" reads 18, "stated" reads 6
        ("gcd_12_18", "The GCD is 6, since 6 divides 12 and 18."),
    ]
    for name, completion in cases:
        assert _score(completion, examples[name], "stated") == 1.0, completion
    assert (
        _score("The GCD is 6, since 6 divides 12 and 18.", examples["gcd_12_18"], "last_number")
        == 0.0
    )
    # Wrong answers stay wrong.
    assert _score("1 + 7 equals 9.", examples["chain_1_7"], "stated") == 0.0
    assert _score("The GCD of 12 and 18 is 2.", examples["gcd_12_18"], "stated") == 0.0


def test_both_rules_agree_where_the_last_number_is_not_a_copied_input(examples):
    ex = examples["chain_1_7"]
    for completion in ("1 + 7 equals 8.", "1 + 7 = 9", "It is 8 or maybe 10", "I cannot say."):
        assert extract_answer(completion, ex.question) == extract_answer(
            completion, ex.question, rule="stated"
        )
    # task_reward (partial credit) reads the same answer as exact_task_reward.
    assert task_reward(PROMPT, LCM_HACK, examples["lcm_2_4"], rule="stated") == 0.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("6 * 9 = 54.", ["54"]),
        ("1 + 7 equals 8.", ["8"]),
        ("The GCD of 12 and 18 is 6.", ["6"]),
        ("The answer is: **-4**", ["-4"]),
        ("Result: $1,234.50", ["1234.50"]),
        ("x = 15 - 43 = -28", ["-28"]),  # "= 15" goes on with "- 43": not stated
        ("12 = 2 * 6, so the GCD is 6", ["6"]),
        ("There are 3 r's; this 5 is not stated", ["3"]),  # "this" is not "is"
        ("LCM(2, 4) is the smallest multiple of 2", []),
        ("", []),
    ],
)
def test_stated_numbers(text, expected):
    assert stated_numbers(text) == expected


@pytest.mark.parametrize(
    "text, question, expected",
    [
        (LCM_HACK, "numbers: 2, 4", None),  # ends on a copied input, states nothing
        ("The LCM(2, 4) is 4. LCM(2, 4)", "numbers: 2, 4", "4"),  # the last stated number
        ("LCM(2, 4) is 9, so LCM(2, 4)", "numbers: 2, 4", "9"),
        ("4.", "numbers: 2, 4", "4"),  # the whole completion is the number
        ("The letter appears 3 times.", "How many times does 'r' appear?", "3"),  # not copied
        ("It has 1 bit", "How many 1 bits are in 8?", None),  # "1" is copied, unstated
        ("It has 1 bit, so the count is 1", "How many 1 bits are in 8?", "1"),
        ("The GCD of 12 and 18 is 6.0", "12, 18", "6.0"),
        ("no number", "12, 18", None),
        ("ends on 18", "", "18"),  # no question: the last number
    ],
)
def test_extract_stated_number(text, question, expected):
    assert extract_stated_number(text, question) == expected


def test_number_key_compares_numbers_by_value():
    assert [number_key(t) for t in ("2", "2.0", "02", " 2. ", "-0", "1E+2", "1,000", "two")] == [
        "2",
        "2",
        "2",
        "2",
        "0",
        None,
        "1000",
        None,
    ]


def test_extract_answer_keeps_tags_and_words_under_both_rules():
    for rule in ("last_number", "stated"):
        assert extract_answer("LCM(2, 4) <answer>4</answer>", "2, 4", rule=rule) == "4"
        assert extract_answer("  blue \n", "Which colour?", rule=rule) == "blue"


# ---- the chance correction ------------------------------------------------------------------

# A hand-made task: ten training questions with these reference answers (q(1) = 0.4, q(2) = 0.3).
REFERENCES = ["1", "1", "2", "3", "1", "2", "4", "6", "1", "2"]


def test_answer_prior_counts_answers_by_value():
    prior = answer_prior(REFERENCES + ["2.0", "1.00"], task="hand")
    assert dict(prior.shares) == {"1": 5 / 12, "2": 4 / 12, "3": 1 / 12, "4": 1 / 12, "6": 1 / 12}
    assert prior.num_questions == 12
    # a number no question has: 0; no number at all: the largest share (stating nothing costs
    # as much as the costliest wrong guess)
    assert (prior.share("2."), prior.share("7"), prior.share(None), prior.share("two")) == (
        4 / 12,
        0.0,
        5 / 12,
        5 / 12,
    )


def test_chance_corrected_is_cohens_kappa_of_one_sample():
    assert chance_corrected(1.0, 0.4) == 1.0  # a right answer earns 1 whatever its share
    assert chance_corrected(0.0, 0.4) == pytest.approx(-2 / 3)  # -q / (1 - q)
    assert chance_corrected(0.5, 0.5) == 0.0  # partial credit: (s - q) / (1 - q)
    assert chance_corrected(0.0, 0.0) == 0.0  # a number no question has costs nothing
    with pytest.raises(ValueError, match="share"):
        chance_corrected(0.0, 1.0)


def _hand_examples():
    return [Example(f"question {i}", a, "hand", i) for i, a in enumerate(REFERENCES)]


def _run(completions, examples, prior, rule="stated"):
    task = functools.partial(exact_task_reward, rule=rule)
    chance = functools.partial(chance_correction, prior=prior, task=exact_task_reward, rule=rule)
    runner = RewardRunner({"task": task, "chance": chance}, timeout_s=None, answer_rule=rule)
    return runner([PROMPT] * len(examples), completions, examples)


def test_any_constant_answer_earns_0_and_an_honest_policy_1():
    examples = _hand_examples()
    prior = answer_prior(REFERENCES, task="hand")
    for constant in ("1", "2", "3", "5"):
        out = _run([f"The answer is {constant}."] * 10, examples, prior)
        assert float(np.mean(out.total.astype(np.float64))) == pytest.approx(0.0, abs=1e-6)
    # A constant "1": right on 4 of 10 (1 each), wrong on 6 (-0.4 / 0.6 each).
    out = _run(["1"] * 10, examples, prior)
    expected = [1.0 if a == "1" else -2 / 3 for a in REFERENCES]
    np.testing.assert_allclose(out.total, expected, rtol=1e-6)
    # accuracy counts correctness, not the corrected reward: 4 of 10 right.
    assert accuracy(out.per_function["task"]) == 0.4
    np.testing.assert_array_equal(out.per_function["task"], [a == "1" for a in REFERENCES])
    honest = _run([f"The answer is {a}." for a in REFERENCES], examples, prior)
    np.testing.assert_array_equal(honest.total, np.ones(10, np.float32))
    np.testing.assert_array_equal(honest.per_function["chance"], np.zeros(10, np.float32))


def test_a_question_independent_guesser_earns_0_in_expectation():
    prior = answer_prior(REFERENCES, task="hand")
    examples = _hand_examples()
    # Answer a with probability p(a), whatever the question: E[r] = sum_a p(a) E_y[r(a, y)].
    p = {"1": 0.1, "2": 0.5, "6": 0.25, "9": 0.15}
    expected = sum(
        weight * float(np.mean(_run([a] * 10, examples, prior).total.astype(np.float64)))
        for a, weight in p.items()
    )
    assert expected == pytest.approx(0.0, abs=1e-6)


def test_the_gcd_collapse_onto_2_earns_0_on_the_training_pool():
    config = apply_overrides(
        config_for("grpo"),
        {"task.name": "gcd", "rewards.answer_rule": "stated", "rewards.chance_correction": True},
    )
    runner = build_rewards(config)
    assert sorted(runner.functions) == ["chance", "task"] and runner.answer_rule == "stated"
    assert runner.weights == {"task": 1.0, "chance": 1.0}
    pool = list(task_pool(config.task, side="train", seed=config.seed))
    share_2 = sum(e.answer == "2" for e in pool) / len(pool)
    assert 0.25 < share_2 < 0.35  # reasoning-gym retries for a gcd > 1: "2" is the mode
    out = runner([PROMPT] * len(pool), ["The GCD is 2."] * len(pool), pool)
    assert accuracy(out.per_function["task"]) == share_2  # the accuracy a constant "2" gets
    assert float(np.mean(out.total.astype(np.float64))) == pytest.approx(0.0, abs=1e-6)
    honest = runner([PROMPT] * 50, [f"The GCD is {e.answer}." for e in pool[:50]], pool[:50])
    np.testing.assert_array_equal(honest.total, np.ones(50, np.float32))


@pytest.mark.parametrize("share_of_1", [0.3, 0.74])
def test_group_std_normalisation_undoes_the_correction_and_centring_keeps_it(share_of_1):
    """A policy that cannot read the question answers "1" or "10" (never a reference) with even
    odds: each group of 4 holds two of each. On a question whose answer is "1" (a share q of
    them) the "1"s earn 1, elsewhere -q / (1 - q); the "10"s earn 0. Averaged over questions,
    "1"'s advantage is 0 when groups are only centred (Dr. GRPO), but dividing each group by
    its own std gives both kinds of group the same spread, so "1" gains q - (1 - q) a unit
    (+0.48 at letter_counting's q = 0.74)."""
    from jaxrl_llm import advantages

    wrong_1 = chance_corrected(0.0, share_of_1)
    rewards = np.array([[1.0, 1.0, 0.0, 0.0], [wrong_1, wrong_1, 0.0, 0.0]], np.float32)
    question_shares = np.array([share_of_1, 1.0 - share_of_1])
    assert float(question_shares @ rewards[:, 0]) == pytest.approx(0.0, abs=1e-6)
    centred = np.asarray(advantages.grpo(rewards, normalize_std=False))
    scaled = np.asarray(advantages.grpo(rewards, normalize_std=True))
    assert float(question_shares @ centred[:, 0]) == pytest.approx(0.0, abs=1e-5)
    drift = float(question_shares @ scaled[:, 0])
    unit = float(scaled[0, 0])  # the "1"s' advantage in a group where they are right
    assert drift == pytest.approx((2 * share_of_1 - 1) * unit, rel=1e-4)
    assert (drift > 0.1) == (share_of_1 > 0.5) and abs(drift) > 0.1


def test_the_default_config_keeps_todays_reward():
    runner = build_rewards(config_for("grpo"))
    assert list(runner.functions) == ["task"] and runner.answer_rule == "last_number"
    lcm = Example("Find the Least Common Multiple (LCM) of these numbers: 2, 4", "4", "hand", 0)
    assert runner([PROMPT], [LCM_HACK], [lcm]).per_function["task"][0] == 1.0


# ---- bad input: one line naming the field and the fix -----------------------------------------


def test_an_unknown_answer_rule_is_refused_naming_the_field():
    config = apply_overrides(config_for("grpo"), {"rewards.answer_rule": "last"})
    with pytest.raises(ValueError, match=r"config\.rewards\.answer_rule='last' .* one of") as e:
        validate_config(config)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="answer_rule"):
        RewardRunner({"task": task_reward}, answer_rule="first")
    with pytest.raises(ValueError, match="rule"):
        extract_answer("7", rule="first")


def test_chance_correction_needs_numeric_answers_and_at_least_two():
    config = apply_overrides(
        config_for("grpo"),
        {"task.name": "spell_backward", "task.train_size": 20, "rewards.chance_correction": True},
    )
    message = (
        r"config\.rewards\.chance_correction=True needs a task whose answers are single numbers"
    )
    with pytest.raises(ValueError, match=message) as e:
        validate_config(config)
    assert "set config.rewards.chance_correction=False" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="at least two different answers"):
        answer_prior(["3", "3.0"], task="hand")


def test_chance_correction_is_refused_for_episode_runs():
    config = apply_overrides(
        config_for("grpo"), {"env.name": "calculator", "rewards.chance_correction": True}
    )
    with pytest.raises(ValueError, match=r"set config\.rewards\.chance_correction=False\.$"):
        validate_config(config)


def test_the_reward_role_reports_its_runners_answer_rule():
    from jaxrl_llm.roles import RewardRole

    runner = RewardRunner({"task": task_reward}, answer_rule="stated")
    role = RewardRole(runner)
    assert role.answer_rule == "stated" and role.without_judges().answer_rule == "stated"


def test_stating_no_answer_costs_as_much_as_the_costliest_wrong_guess():
    """An empty or number-free completion is charged the largest share: it never ranks above a
    wrong guess of its group, so group advantages do not teach the policy to say nothing (the
    collapse of Gemma 3 270M's run, 2026-11-26: answers of 3.5 tokens -> 1 in 4 steps)."""
    prior = answer_prior(REFERENCES, task="hand")
    examples = _hand_examples()[:4]
    wrong = next(a for a in prior.shares if a != examples[0].answer)
    completions = ["", "I do not know.", f"The answer is {wrong}.", "The answer is 12345."]
    out = _run(completions, [examples[0]] * 4, prior)
    costliest = -max(prior.shares.values()) / (1 - max(prior.shares.values()))
    np.testing.assert_allclose(out.total[:2], [costliest, costliest], rtol=1e-6)
    assert out.total[0] <= out.total[2] and out.total[0] < out.total[3] == 0.0
    assert prior.share(None) == prior.share("seven") == max(prior.shares.values())
