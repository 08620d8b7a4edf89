"""The collected-field registry on hand-made arrays: a registered server's values reach
`make_batch` under `Experience.collected`, a request without a server is refused by name, and a
registration that would take a registered name or type is refused unless it says `replace`."""

import dataclasses
import types

import numpy as np
import pytest

from jaxrl_llm.algorithms import (
    Algorithm,
    CollectContext,
    Experience,
    GoldReferences,
    GreedyBaseline,
    build_batch,
    register_collected,
)
from jaxrl_llm.algorithms.collected import (
    check_served,
    collected_fields,
    serve_collected,
    server_of,
)
from jaxrl_llm.data import Example


@dataclasses.dataclass(frozen=True)
class QuestionChars:
    """A request for each sample's question length in characters, times `scale`."""

    scale: int = 1


def serve_question_chars(request, context):
    return context.per_sample([request.scale * len(e.question) for e in context.examples])


@dataclasses.dataclass(frozen=True)
class Unserved:
    """A request no server is registered for."""


def _context(group=2):
    examples = [Example("2 + 3 =", "5", "hand", 0), Example("10 - 1 =", "9", "hand", 1)]
    rows = len(examples) * group
    rollout = types.SimpleNamespace(
        tokens=np.zeros((rows, 4), np.int32),
        completion_mask=np.ones((rows, 4), bool),
        logprobs=np.zeros((rows, 4), np.float32),
    )
    return CollectContext(
        config=None,
        examples=examples,
        group_size=group,
        rollout=rollout,
        completions=[""] * rows,
        rewards=np.zeros(rows, np.float32),
        tokenizer=None,
    )


def test_a_registered_servers_values_reach_make_batch():
    register_collected(QuestionChars, serve_question_chars, name="question_chars")
    assert server_of(QuestionChars).name == "question_chars"
    context = _context()
    request = QuestionChars(scale=10)
    served = serve_collected([GreedyBaseline(), request], context)  # built-in ones skipped
    assert list(served) == ["question_chars"]
    np.testing.assert_array_equal(served["question_chars"], [70, 70, 80, 80])

    def make_batch(experience, state):
        del state
        adv_b = np.asarray(experience.collected["question_chars"], np.float32) / 100
        return build_batch(experience.rollout, adv_b), {}

    algorithm = Algorithm("chars", make_batch, loss=None, collects=(request,))
    experience = Experience(context.rollout, context.rewards, 2, collected=served)
    batch, _ = algorithm.make_batch(experience, ())
    np.testing.assert_allclose(batch.advantages, [0.7, 0.7, 0.8, 0.8])
    assert Experience(context.rollout, context.rewards, 2).collected == {}


def test_a_server_must_return_one_row_per_sample():
    @dataclasses.dataclass(frozen=True)
    class PerPrompt:
        """A request whose server forgets to repeat per prompt."""

    register_collected(PerPrompt, lambda request, context: [1, 2], name="per_prompt_rows")
    with pytest.raises(ValueError, match=r"'per_prompt_rows'.*shape \(2,\).*\[B=4, \.\.\.\]"):
        serve_collected([PerPrompt()], _context())
    register_collected(QuestionChars, serve_question_chars, name="question_chars")
    with pytest.raises(ValueError, match="asks twice for collected field 'question_chars'"):
        serve_collected([QuestionChars(1), QuestionChars(2)], _context())


def test_a_request_without_a_server_is_refused_by_name():
    algorithm = Algorithm("mine", None, None, collects=(Unserved(),))
    with pytest.raises(ValueError) as info:
        check_served(algorithm, (GreedyBaseline,), collector="the single-turn sampler")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "config.algorithm='mine' asks for Unserved(), which the single-turn sampler does not "
        "collect: no server is registered for Unserved: call jaxrl_llm.algorithms."
        "register_collected(Unserved, serve, name=...)"
    )
    # a built-in request a collector does not serve: the collector's own advice
    remax_like = Algorithm("remax", None, None, collects=(GreedyBaseline(),))
    with pytest.raises(ValueError, match=r"GreedyBaseline\(\), which the episodes .*: use grpo"):
        check_served(remax_like, (), collector="the episodes", fix="use grpo")
    check_served(remax_like, (GreedyBaseline, GoldReferences), collector="the sampler")


def test_a_taken_name_or_type_is_refused_unless_replaced():
    @dataclasses.dataclass(frozen=True)
    class Lengths:
        """One request type."""

    @dataclasses.dataclass(frozen=True)
    class OtherLengths:
        """Another request type, wanting the same name."""

    def serve(request, context):
        return np.zeros(context.num_samples)

    first = register_collected(Lengths, serve, name="dup_lengths")
    with pytest.raises(ValueError, match=r"'dup_lengths' is already served for .*Lengths.*replace"):
        register_collected(OtherLengths, serve, name="dup_lengths")
    with pytest.raises(ValueError, match="already served"):
        register_collected(Lengths, serve, name="dup_lengths_again")  # one name per type
    assert collected_fields()["dup_lengths"] is first
    replaced = register_collected(OtherLengths, serve, name="dup_lengths", replace=True)
    assert collected_fields()["dup_lengths"] is replaced and server_of(Lengths) is None

    # the same definition registered again (a module or cell run twice) replaces it quietly
    def rerun():
        @dataclasses.dataclass(frozen=True)
        class OtherLengths:
            """The same class, defined again."""

        return OtherLengths

    again = rerun()
    again.__qualname__ = OtherLengths.__qualname__
    register_collected(again, serve, name="dup_lengths")
    assert server_of(again).name == "dup_lengths" and server_of(OtherLengths) is None


def test_bad_registrations_are_refused():
    with pytest.raises(ValueError, match="GreedyBaseline is a built-in request"):
        register_collected(GreedyBaseline, serve_question_chars, name="baseline")
    with pytest.raises(ValueError, match=r"name='two words' must be a Python identifier"):
        register_collected(Unserved, serve_question_chars, name="two words")
    with pytest.raises(ValueError, match="must be a class"):
        register_collected(Unserved(), serve_question_chars, name="instance")


def test_per_sample_repeats_each_prompts_values_for_its_group():
    context = _context(group=3)
    np.testing.assert_array_equal(context.per_sample([1, 2]), [1, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(context.per_sample([[1, 0], [0, 1]])[:, 0], [1, 1, 1, 0, 0, 0])
    assert context.num_samples == 6
