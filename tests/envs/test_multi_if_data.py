"""Multi-IF-style conversations: determinism, disjoint splits, accumulation, exact turn scores."""

import pytest

from jaxrl_llm.envs import multi_if_data
from jaxrl_llm.envs.instructions import INSTRUCTION_KINDS, Instruction, conflicts
from jaxrl_llm.envs.multi_if_data import (
    KIND_WEIGHTS,
    TOPICS,
    Conversation,
    make_conversations,
    score_turn,
    topics_for_split,
)


def _make(kind, **kwargs):
    return Instruction(kind, kwargs, f"<{kind}>")


def test_topics_and_weights():
    assert len(TOPICS) == 60
    assert len({topic for topic, _ in TOPICS}) == 60
    for _, words in TOPICS:
        assert len(words) == 4
        assert all(word.isalpha() and word.islower() for word in words)
    assert set(KIND_WEIGHTS) == set(INSTRUCTION_KINDS)
    assert topics_for_split("test")[:2] == (TOPICS[4], TOPICS[9])
    assert topics_for_split("train")[:5] == TOPICS[:4] + (TOPICS[5],)
    with pytest.raises(ValueError, match="split='dev' must be one of"):
        topics_for_split("dev")


def test_make_conversations_is_deterministic_and_prefix_stable():
    first = make_conversations(20, seed=3)
    assert make_conversations(20, seed=3) == first
    assert make_conversations(5, seed=3) == first[:5]
    assert make_conversations(20, seed=4) != first
    assert make_conversations(20, seed=3, split="test") != first
    assert [c.id for c in first[:2]] == ["train-3-00000", "train-3-00001"]


def test_make_conversations_exact_first_conversation():
    conversation = make_conversations(1, seed=0)[0]
    assert conversation.topic == "a pet cat"
    assert conversation.user_turns == (
        "Describe a pet cat briefly. Write your entire answer in lowercase letters only.",
        "Now rewrite your text. Everything I asked before still holds. "
        'Include the word "nap" in your answer.',
        "Continue your text with one more idea and give me the whole text again. "
        'My earlier instructions still apply. Do not use the word "nap" anywhere in your answer. '
        'This replaces my earlier instruction: Include the word "nap" in your answer.',
    )
    kinds = [[i.kind for i in turn] for turn in conversation.turn_instructions]
    assert kinds == [
        ["case:lowercase"],
        ["case:lowercase", "keywords:include"],
        ["case:lowercase", "keywords:forbidden"],
    ]


def test_splits_never_share_topic_or_topic_instruction_pair():
    def pairs(split):
        conversations = make_conversations(300, seed=0, split=split)
        return {
            (c.topic, tuple((i.kind, i.text) for i in c.turn_instructions[-1]))
            for c in conversations
        }, {c.topic for c in conversations}

    train_pairs, train_topics = pairs("train")
    test_pairs, test_topics = pairs("test")
    assert not train_pairs & test_pairs
    assert not train_topics & test_topics
    assert test_topics == {topic for topic, _ in topics_for_split("test")}


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize(("num_turns", "per_turn"), [(3, 1), (3, 2), (5, 3)])
def test_instructions_accumulate_unless_replaced(split, num_turns, per_turn):
    conversations = make_conversations(
        1000, seed=1, num_turns=num_turns, split=split, instructions_per_turn=per_turn
    )
    replaced = 0
    for conversation in conversations:
        assert len(conversation.user_turns) == len(conversation.turn_instructions) == num_turns
        previous: tuple[Instruction, ...] = ()
        for message, current in zip(
            conversation.user_turns, conversation.turn_instructions, strict=True
        ):
            new = [i for i in current if i not in previous]
            assert len(new) == per_turn
            assert current[len(current) - per_turn :] == tuple(new)  # new ones come last
            for old in previous:
                dropped = old not in current
                assert dropped == any(conflicts(old, n) for n in new)
                assert (f"This replaces my earlier instruction: {old.text}" in message) == dropped
                replaced += dropped
            for instruction in new:
                assert instruction.text in message
            assert not any(conflicts(a, b) for i, a in enumerate(current) for b in current[i + 1 :])
            previous = current
    assert replaced > 0


def test_turn_three_keeps_turn_one_instruction():
    conversation = make_conversations(3, seed=0)[1]
    no_commas = conversation.turn_instructions[0][0]
    assert no_commas.kind == "format:no_commas"
    assert no_commas in conversation.turn_instructions[2]


def test_make_conversations_validates():
    with pytest.raises(ValueError, match="count=-1 must be >= 0"):
        make_conversations(-1, seed=0)
    with pytest.raises(ValueError, match="num_turns=0 must be >= 1"):
        make_conversations(1, seed=0, num_turns=0)
    with pytest.raises(ValueError, match=r"instructions_per_turn=4 must be in \[1, 3\]"):
        make_conversations(1, seed=0, instructions_per_turn=4)
    with pytest.raises(ValueError, match="split='dev'"):
        make_conversations(1, seed=0, split="dev")
    assert make_conversations(0, seed=0) == []


@pytest.mark.parametrize("split", ["train", "test"])
def test_long_conversations_do_not_run_out_of_instructions(split):
    conversations = make_conversations(
        300, seed=2, num_turns=30, instructions_per_turn=3, split=split
    )
    assert max(len(turn) for c in conversations for turn in c.turn_instructions) == 10


def test_running_out_of_compatible_instructions_raises(monkeypatch):
    # Only two kinds, and they conflict: a turn cannot get two new instructions.
    monkeypatch.setattr(multi_if_data, "INSTRUCTION_KINDS", ("case:lowercase", "case:uppercase"))
    monkeypatch.setattr(
        multi_if_data, "KIND_WEIGHTS", {"case:lowercase": 1.0, "case:uppercase": 1.0}
    )
    with pytest.raises(ValueError, match="0 instructions in force leave room for only 1 of 2 new"):
        make_conversations(1, seed=0, instructions_per_turn=2)


def _hand_written():
    lower = _make("case:lowercase")
    cap = _make("length:max_words", max_words=8)
    end = _make("startend:end_phrase", phrase="The end.")
    include = _make("keywords:include", keywords=("ants",))
    return Conversation(
        "hand-0",
        "a picnic",
        ("Write about a picnic.", "Rewrite it.", "Rewrite it again."),
        ((lower,), (lower, cap), (lower, cap, end, include)),
    )


@pytest.mark.parametrize(
    ("turn", "response", "fraction", "verdicts"),
    [
        (0, "ants ate our lunch.", 1.0, [True]),
        (0, "Ants ate our lunch.", 0.0, [False]),
        (1, "ants ate our lunch in the park today, sadly.", 0.5, [True, False]),
        (2, "ants ate it. the end.", 1.0, [True, True, True, True]),
        (2, "Ants ate it. The end.", 0.75, [False, True, True, True]),
        (2, "We ate lunch on a blanket. The End.", 0.5, [False, True, True, False]),
        (2, "", 0.0, [False, False, False, False]),
    ],
)
def test_score_turn_exact(turn, response, fraction, verdicts):
    assert score_turn(_hand_written(), turn, response) == (fraction, verdicts)


def test_score_turn_validates_turn():
    with pytest.raises(ValueError, match=r"turn=3 must be in \[0, 3\) for hand-0"):
        score_turn(_hand_written(), 3, "x")


def test_public_names_have_docstrings():
    for name in multi_if_data.__all__:
        obj = getattr(multi_if_data, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), name
