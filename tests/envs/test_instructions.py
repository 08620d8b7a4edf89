"""Verifiable instructions: every kind's checker on passing and failing replies, conflicts, sampling."""

import random

import pytest

from jaxrl_llm.envs import instructions
from jaxrl_llm.envs.instructions import (
    INSTRUCTION_KINDS,
    Instruction,
    check,
    conflicts,
    sample_instruction,
    split_sentences,
    split_words,
)


def _make(kind, **kwargs):
    return Instruction(kind, kwargs, f"<{kind}>")


# (instruction, response, verdict): at least one True and one False for every kind.
CASES = [
    (_make("length:max_words", max_words=3), "  one two three  ", True),
    (_make("length:max_words", max_words=3), "one two three four", False),
    (_make("length:max_words", max_words=3), "Don't stop -- ok.", True),  # "Don't" is one word
    (_make("length:max_words", max_words=3), "well-known fact", True),
    (_make("length:max_words", max_words=2), "well-known fact", False),  # a hyphen splits
    (_make("length:max_sentences", max_sentences=2), "Hi there. Bye!", True),
    (_make("length:max_sentences", max_sentences=2), "One. Two? Three!", False),
    (_make("length:max_sentences", max_sentences=1), "Dr. Lee paid 3.5 dollars.", True),
    (_make("length:max_sentences", max_sentences=1), "* one\n* two", False),  # a line per bullet
    (_make("format:no_commas"), "Sun and sand.", True),
    (_make("format:no_commas"), "Sun, sand.", False),
    (_make("format:no_commas"), "Sun\uff0csand.", False),
    (_make("keywords:include", keywords=("sand",)), "Warm SAND everywhere.", True),
    (_make("keywords:include", keywords=("sand",)), "Sandy shoes.", False),
    (_make("keywords:include", keywords=("sand", "sea")), "Sand and sky.", False),
    (_make("keywords:forbidden", forbidden_words=("very",)), "Everything is fine.", True),
    (_make("keywords:forbidden", forbidden_words=("very",)), "It is Very fine.", False),
    (_make("case:lowercase"), "all small, 42 times.", True),
    (_make("case:lowercase"), "all small but One.", False),
    (_make("case:lowercase"), "42 + 7", False),  # no letter at all
    (_make("case:uppercase"), "ALL CAPS, 42 TIMES.", True),
    (_make("case:uppercase"), "ALL CAPS BUT oNE.", False),
    (_make("change_case:uppercase_word_count", min_count=2), "A BIG and LOUD day.", True),
    (_make("change_case:uppercase_word_count", min_count=2), "I saw A BIG day.", False),
    (_make("startend:end_phrase", phrase="The end."), "A story. the END.", True),
    (_make("startend:end_phrase", phrase="The end."), "A story. The end", False),
    (_make("startend:end_phrase", phrase="The end."), "The end. Bye.", False),
    (_make("startend:end_phrase", phrase="Have a nice day."), "I behave a nice day.", False),
    (_make("startend:start_word", word="Today"), '"today, we walk."', True),
    (_make("startend:start_word", word="Today"), "* Today we walk.", True),
    (_make("startend:start_word", word="Today"), "Todays walk.", False),
    (_make("startend:quotation"), ' "We walked home." ', True),
    (_make("startend:quotation"), "\u201cWe walked home.\u201d", True),
    (_make("startend:quotation"), '"We walked home.', False),
    (_make("startend:quotation"), '" "', False),
    (_make("format:bullets", num_bullets=2), "Intro:\n* one\n- two", True),
    (_make("format:bullets", num_bullets=2), "* one\n* two\n* three", False),
    (_make("format:bullets", num_bullets=2), "**bold**\n* one\n1. two", False),
    (_make("format:title"), "<<My Day>>\nIt was fine.", True),
    (_make("format:title"), "<< >> It was fine.", False),
    (_make("format:title"), "<My Day> It was fine.", False),
    (_make("format:json"), '{"answer": "sun"}', True),
    (_make("format:json"), '```json\n{"answer": "sun"}\n```', True),
    (_make("format:json"), '["sun", "sand"]', True),
    (_make("format:json"), '"just a string"', False),
    (_make("format:json"), 'Here: {"answer": "sun"}', False),
]


@pytest.mark.parametrize(("instruction", "response", "verdict"), CASES)
def test_check_exact_verdicts(instruction, response, verdict):
    assert check(instruction, response) is verdict


def test_cases_cover_every_kind_both_ways():
    for kind in INSTRUCTION_KINDS:
        verdicts = {verdict for instruction, _, verdict in CASES if instruction.kind == kind}
        assert verdicts == {True, False}, kind


@pytest.mark.parametrize("kind", INSTRUCTION_KINDS)
def test_empty_reply_follows_nothing(kind):
    instruction = sample_instruction(kind, random.Random(0), topic="a picnic")
    assert check(instruction, " \n ") is False


def test_check_rejects_unknown_kind_and_wrong_kwargs():
    with pytest.raises(ValueError, match="unknown instruction kind 'case:title'"):
        check(Instruction("case:title", {}, ""), "x")
    with pytest.raises(ValueError, match=r"takes kwargs \['max_words'\], got \['n'\]"):
        check(Instruction("length:max_words", {"n": 3}, ""), "x")


def test_split_words_and_sentences():
    assert split_words("It's 3.5 km -- well-known!") == ["It's", "3", "5", "km", "well", "known"]
    assert split_sentences('He said "stop." Then (he left.) Etc. e.g. this! ...\n\n- a') == [
        'He said "stop."',
        "Then (he left.)",
        "Etc. e.g. this!",
        "- a",
    ]
    assert split_sentences("no end mark") == ["no end mark"]
    assert split_sentences("  \n * \n") == []


def test_conflicts():
    lower, upper = _make("case:lowercase"), _make("case:uppercase")
    words_40, words_30 = (
        _make("length:max_words", max_words=40),
        _make("length:max_words", max_words=30),
    )
    sentences = _make("length:max_sentences", max_sentences=2)
    json_, bullets = _make("format:json"), _make("format:bullets", num_bullets=2)
    include_sand = _make("keywords:include", keywords=("sand",))
    ban_sand = _make("keywords:forbidden", forbidden_words=("Sand",))
    ban_very = _make("keywords:forbidden", forbidden_words=("very",))
    start_sand = _make("startend:start_word", word="Sand")
    no_commas = _make("format:no_commas")
    end_comma = _make("startend:end_phrase", phrase="Bye, all.")
    capitals = _make("change_case:uppercase_word_count", min_count=1)
    quotes = _make("startend:quotation")
    pairs = [
        ((lower, upper), True),
        ((lower, capitals), True),
        ((upper, capitals), False),
        ((words_40, words_30), True),
        ((words_40, sentences), True),
        ((json_, bullets), True),
        ((json_, lower), False),
        ((quotes, end_comma), True),
        ((include_sand, ban_sand), True),
        ((start_sand, ban_sand), True),
        ((include_sand, ban_very), False),
        ((no_commas, end_comma), True),
        ((no_commas, include_sand), False),
        ((lower, no_commas), False),
    ]
    for (a, b), expected in pairs:
        assert conflicts(a, b) is expected, (a.kind, b.kind)
        assert conflicts(b, a) is expected, (b.kind, a.kind)


def test_sample_instruction_is_seeded_and_uses_topic_words():
    rng = random.Random(0)
    assert sample_instruction("keywords:include", rng, topic="a picnic", topic_words=("ants",)) == (
        Instruction(
            "keywords:include", {"keywords": ("ants",)}, 'Include the word "ants" in your answer.'
        )
    )
    first = [sample_instruction(k, random.Random(5), topic="a picnic") for k in INSTRUCTION_KINDS]
    again = [sample_instruction(k, random.Random(5), topic="a picnic") for k in INSTRUCTION_KINDS]
    assert first == again
    # Without topic_words, keywords are the topic's words of four or more letters.
    assert sample_instruction("keywords:include", random.Random(1), topic="a picnic").kwargs == {
        "keywords": ("picnic",)
    }
    with pytest.raises(ValueError, match="no keywords for topic='a day'"):
        sample_instruction("keywords:include", random.Random(1), topic="a day")


@pytest.mark.parametrize("kind", INSTRUCTION_KINDS)
def test_sampled_instruction_is_checkable_and_consistent(kind):
    for seed in range(20):
        instruction = sample_instruction(
            kind, random.Random(seed), topic="a picnic", topic_words=("basket", "ants")
        )
        assert instruction.kind == kind
        assert instruction.text.endswith((".", '"')) and instruction.text[0].isupper()
        check(instruction, "some reply")  # kwargs match the kind: no ValueError
        assert conflicts(instruction, instruction)


def test_public_names_have_docstrings():
    for name in instructions.__all__:
        obj = getattr(instructions, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), name
