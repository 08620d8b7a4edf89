"""Judges and their mixture: rule-based verdicts, per-source mixtures, and judges that raise,
hang or return nonsense give "no verdict" (NaN), are counted, and never stop the batch; the LLM
judge scores p(yes) on a tiny model and turns its own failures into no verdict."""

import time

import numpy as np
import pytest

from jaxrl_llm.constraints import (
    FormatJudge,
    JudgeMixture,
    LengthJudge,
    RegexJudge,
    RepetitionJudge,
    Verdict,
    VerifierJudge,
)
from jaxrl_llm.data import Example
from jaxrl_llm.rewards import exact_task_reward

EX = Example(question="What is 2 + 3?", answer="5", source="chain_sum", index=0)
OTHER = Example(question="gcd of 4 and 6?", answer="2", source="gcd", index=1)


def test_rule_judges():
    assert LengthJudge(max_words=3)("", "The answer is 5.", EX).violated
    assert not LengthJudge(max_words=4)("", "The answer is 5.", EX).violated
    assert LengthJudge(max_chars=5)("", "123456", EX) == Verdict(True, "6 characters > 5")
    assert not FormatJudge(r"The answer is -?\d+\.")("", " The answer is 5. ", EX).violated
    assert FormatJudge(r"The answer is -?\d+\.")("", "5", EX).violated
    assert RegexJudge(r"(?i)as an ai")("", "As an AI, I think 5", EX).violated
    assert RepetitionJudge(n=2, max_repeats=2)("", "so so so so so", EX).violated
    assert not RepetitionJudge()("", "one two three four", EX).violated
    verifier = VerifierJudge(exact_task_reward)
    assert not verifier("", "The answer is 5.", EX).violated
    assert verifier("", "The answer is 6.", EX).violated


def test_mixture_applies_judges_per_source_and_reports_rates():
    mixture = JudgeMixture(
        {"length": LengthJudge(max_words=3), "verifier": VerifierJudge(exact_task_reward)},
        sources={"verifier": ["chain_sum"]},
        timeout_s=None,
    )
    out = mixture(["p"] * 3, ["The answer is 5.", "5", "The answer is 3."], [EX, EX, OTHER])
    assert out.names == ("length", "verifier")
    np.testing.assert_array_equal(out.violations[0], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(out.violations[1][:2], [0.0, 0.0])
    assert np.isnan(out.violations[1][2])  # the verifier judge does not apply to gcd
    np.testing.assert_array_equal(out.violated(), [True, False, True])
    metrics = out.metrics()
    assert metrics["judge/length/violation_rate"] == pytest.approx(2 / 3)
    assert metrics["judge/verifier/no_verdict"] == 1.0
    with pytest.raises(ValueError, match="do not exist"):
        JudgeMixture({"length": LengthJudge(max_words=3)}, sources={"lenght": ["x"]})


def test_failing_hanging_and_nonsense_judges_give_no_verdict():
    def raises(prompt, completion, example):
        if completion == "boom":
            raise RuntimeError("judge crashed")
        return False

    def hangs(prompt, completion, example):
        if completion == "slow":
            time.sleep(5)
        return True

    def nonsense(prompt, completion, example):
        return "maybe"

    mixture = JudgeMixture({"raises": raises, "hangs": hangs, "nonsense": nonsense}, timeout_s=0.5)
    start = time.time()
    out = mixture(["p"] * 2, ["boom", "slow"], [EX, EX])
    assert time.time() - start < 4  # the hanging call was abandoned at its limit
    assert np.isnan(out.violations[0, 0]) and out.violations[0, 1] == 0.0
    assert out.violations[1, 0] == 1.0 and np.isnan(out.violations[1, 1])
    assert np.isnan(out.violations[2]).all()
    assert out.num_failed == {"raises": 1, "hangs": 1, "nonsense": 2}
    assert not out.violated()[1]  # no verdict is not a violation


class _BrokenLLM:
    batched = True

    def judge_batch(self, prompts, completions, examples):
        return np.full(len(completions), np.nan, np.float32)


def test_batched_judge_failure_is_counted():
    out = JudgeMixture({"llm": _BrokenLLM(), "len": LengthJudge(max_words=1)}, timeout_s=None)(
        ["p"], ["a b"], [EX]
    )
    assert np.isnan(out.violations[0, 0]) and out.violations[1, 0] == 1.0
    assert out.num_failed["llm"] == 1


def test_llm_judge_scores_p_yes_and_survives_its_failures(caplog):
    from jaxrl_llm.constraints.llm_judge import LLMJudge
    from jaxrl_llm.models import init_model, tiny_config
    from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf
    from jaxrl_llm.models.registry import resolve_model_path

    path = resolve_model_path("smollm2-135m-instruct")
    tokenizer = tokenizer_from_gguf(read_gguf(path), source=path)
    model = init_model(tiny_config(vocab_size=tokenizer.vocab_size), seed=0)
    from flax import nnx

    judge = LLMJudge(model, nnx.state(model, nnx.Param), tokenizer, batch_size=2, threshold=0.5)
    p = judge.scores(["The answer is 5.", "no idea", "5"], [EX, EX, EX])
    assert p.shape == (3,) and ((p > 0) & (p < 1)).all()
    verdicts = judge.judge_batch(None, ["The answer is 5.", "no idea", "5"], [EX, EX, EX])
    np.testing.assert_array_equal(verdicts, (p < 0.5).astype(np.float32))

    judge.scores = lambda completions, examples: (_ for _ in ()).throw(RuntimeError("OOM"))
    assert np.isnan(judge.judge_batch(None, ["x"], [EX])).all()
    assert "no verdict" in caplog.text and "OOM" in caplog.text

    judge.timeout_s = 0.2
    judge.scores = lambda completions, examples: time.sleep(3)
    start = time.time()
    assert np.isnan(judge.judge_batch(None, ["x"], [EX])).all()
    assert time.time() - start < 2
