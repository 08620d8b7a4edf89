"""Verifiable instructions in the style of IFEval: a rule, its arguments, its sentence, its checker.

See "Instruction-Following Evaluation for Large Language Models" (Zhou et al. 2023, 2311.07911)
for the kinds of instruction, and "Multi-IF: Benchmarking LLMs on Multi-Turn and Multilingual
Instructions Following" (He et al. 2024, 2410.15553) for their use over several turns.

The checkers are written here (lm-eval's need nltk's punkt data, which downloads at import time).
They need no model, no data files and no network: words and sentences come from the two regex
helpers `split_words` and `split_sentences`. Every checker strips surrounding whitespace first, and
an empty response follows no instruction (so an empty reply never earns reward).

Example:
  >>> instruction = sample_instruction("length:max_words", random.Random(0), topic="a picnic")
  >>> instruction.text, check(instruction, "A short answer.")
  ('Answer in at most 60 words.', True)
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = [
    "INSTRUCTION_KINDS",
    "Instruction",
    "check",
    "conflicts",
    "sample_instruction",
    "split_sentences",
    "split_words",
]


class Instruction(NamedTuple):
    """One verifiable instruction.

    Attributes:
      kind: one of `INSTRUCTION_KINDS`, e.g. "length:max_words".
      kwargs: the rule's arguments, e.g. {"max_words": 40}; word lists are tuples.
      text: the sentence shown to the user, e.g. "Answer in at most 40 words."

    Example:
      >>> Instruction("format:no_commas", {}, "Do not use any commas in your answer.").kind
      'format:no_commas'
    """

    kind: str
    kwargs: dict
    text: str


# A word: a run of letters and digits, joined across an apostrophe ("don't" is one word).
_WORD = r"[^\W_]+(?:['\u2019][^\W_]+)*"
_WORD_RE = re.compile(_WORD)
# A sentence end: '.', '!' or '?' (a run of them), then closing quotes or brackets, then a space.
_SENTENCE_END_RE = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s|$)")
# A '.' after one of these does not end a sentence.
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "approx"}
)
_BULLET_RE = re.compile(r"^[ \t]*[*\-\u2022][ \t]+\S", re.MULTILINE)
_TITLE_RE = re.compile(r"<<([^<>\n]+)>>")
_FENCED_RE = re.compile(r"```(?:json)?[ \t]*\n?(.*?)\n?[ \t]*```", re.DOTALL | re.IGNORECASE)


def split_words(text: str) -> list[str]:
    """The words of a text: runs of letters and digits, joined across an apostrophe.

    Punctuation and markdown are not words; a hyphen splits ("well-known" is two words, as in
    IFEval's `\\w+` count), an apostrophe does not ("don't" is one word; IFEval counts two).

    Example:
      >>> split_words("Don't stop -- it's well-known!")
      ["Don't", 'stop', "it's", 'well', 'known']
    """
    return _WORD_RE.findall(text)


def split_sentences(text: str) -> list[str]:
    """The sentences of a text, by a small rule-based splitter (no nltk data).

    A sentence ends at a run of '.', '!' or '?' (with any closing quotes or brackets) that is
    followed by whitespace or the end of the text, and at every line break, so each bullet line is
    a sentence. A single '.' after a common abbreviation (Mr, Dr, etc, e.g, i.e, ...) does not end
    one, nor does a '.' inside a number ("3.5"). Pieces with no letter or digit (a lone bullet
    marker, "...") are dropped. Text after the last end mark is a sentence too.

    Example:
      >>> split_sentences("Hi Dr. Lee! It costs 3.5 dollars, e.g. today.\\n* one\\n* two")
      ['Hi Dr. Lee!', 'It costs 3.5 dollars, e.g. today.', '* one', '* two']
    """
    sentences = []
    for line in text.splitlines():
        start = 0
        for match in _SENTENCE_END_RE.finditer(line):
            before = line[start : match.start()].split()
            if match.group() == "." and before and before[-1].lower() in _ABBREVIATIONS:
                continue
            sentences.append(line[start : match.end()].strip())
            start = match.end()
        sentences.append(line[start:].strip())
    return [sentence for sentence in sentences if _WORD_RE.search(sentence)]


def _contains_phrase(text: str, phrase: str) -> bool:
    """Whether `phrase` occurs in `text` as whole words, ignoring case."""
    pattern = r"(?<![^\W_])" + re.escape(phrase) + r"(?![^\W_])"
    return re.search(pattern, text, re.IGNORECASE) is not None


# Checkers: each gets the stripped, non-empty response and the instruction's kwargs.


def _max_words(text: str, *, max_words: int) -> bool:
    """At most `max_words` words (as `split_words` counts them)."""
    return len(split_words(text)) <= max_words


def _max_sentences(text: str, *, max_sentences: int) -> bool:
    """At most `max_sentences` sentences (as `split_sentences` counts them)."""
    return len(split_sentences(text)) <= max_sentences


def _no_commas(text: str) -> bool:
    """No ',' and no full-width '，' anywhere."""
    return "," not in text and "\uff0c" not in text


def _include(text: str, *, keywords: tuple[str, ...]) -> bool:
    """Every keyword as a whole word, any case ("dogs" does not count for "dog")."""
    return all(_contains_phrase(text, keyword) for keyword in keywords)


def _forbidden(text: str, *, forbidden_words: tuple[str, ...]) -> bool:
    """None of the words as a whole word, any case ("dogs" does not break a ban on "dog")."""
    return not any(_contains_phrase(text, word) for word in forbidden_words)


def _lowercase(text: str) -> bool:
    """No uppercase letter, and at least one letter."""
    return any(c.isalpha() for c in text) and not any(c.isupper() for c in text)


def _uppercase(text: str) -> bool:
    """No lowercase letter, and at least one letter."""
    return any(c.isalpha() for c in text) and not any(c.islower() for c in text)


def _uppercase_word_count(text: str, *, min_count: int) -> bool:
    """At least `min_count` words of two or more letters, all of them capitals ("I", "A" don't count)."""
    count = 0
    for word in split_words(text):
        letters = [c for c in word if c.isalpha()]
        count += len(letters) >= 2 and all(c.isupper() for c in letters)
    return count >= min_count


def _end_phrase(text: str, *, phrase: str) -> bool:
    """Ends with `phrase` exactly (any case, punctuation included), starting at a word boundary."""
    if not text.lower().endswith(phrase.lower()):
        return False
    before = text[: len(text) - len(phrase)]
    return not before or not (before[-1].isalnum() or before[-1] == "_")


def _start_word(text: str, *, word: str) -> bool:
    """The first word (leading quotes, bullets, '#' or '<<' skipped) is `word`, any case."""
    words = split_words(text)
    return bool(words) and words[0].lower() == word.lower()


def _quotation(text: str) -> bool:
    """Starts and ends with a double quote ('"'...'"' or curly '“'...'”') with text inside."""
    wrapped = text[:1] + text[-1:] in ('""', "\u201c\u201d")
    return len(text) >= 2 and wrapped and bool(text[1:-1].strip())


def _bullets(text: str, *, num_bullets: int) -> bool:
    """Exactly `num_bullets` lines that start with '*', '-' or '•', a space, then text.

    Other lines are allowed; "**bold**" and "1." are not bullets.
    """
    return len(_BULLET_RE.findall(text)) == num_bullets


def _title(text: str) -> bool:
    """A title anywhere: <<...>> on one line, with a non-space character inside."""
    return any(title.strip() for title in _TITLE_RE.findall(text))


def _json(text: str) -> bool:
    """The whole response is a JSON object or array, optionally in one ```json fenced block.

    A bare JSON string or number does not count; neither does text around the JSON.
    """
    fenced = _FENCED_RE.fullmatch(text)
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return False
    return isinstance(value, dict | list)


# Samplers: each gets the rng and the topic's words, and returns (kwargs, text).

_OPENERS = ("Today", "Yes", "Honestly", "Imagine", "Sometimes", "Once")
_END_PHRASES = (
    "The end.",
    "That is all.",
    "Thank you for reading.",
    "Have a nice day.",
    "Any other questions?",
)
_FILLER_WORDS = ("very", "really", "also", "good", "nice", "things")


def _sample_max_words(rng, words):
    n = rng.choice((30, 40, 50, 60))
    return {"max_words": n}, f"Answer in at most {n} words."


def _sample_max_sentences(rng, words):
    n = rng.choice((2, 3, 4))
    return {"max_sentences": n}, f"Answer in at most {n} sentences."


def _sample_include(rng, words):
    keyword = rng.choice(words)
    return {"keywords": (keyword,)}, f'Include the word "{keyword}" in your answer.'


def _sample_forbidden(rng, words):
    word = rng.choice(tuple(words) + _FILLER_WORDS)
    return {"forbidden_words": (word,)}, f'Do not use the word "{word}" anywhere in your answer.'


def _sample_uppercase_word_count(rng, words):
    n = rng.choice((1, 2, 3))
    plural = "word" if n == 1 else "words"
    text = f"Include at least {n} {plural} written in all capital letters, like WOW."
    return {"min_count": n}, text


def _sample_end_phrase(rng, words):
    phrase = rng.choice(_END_PHRASES)
    return {
        "phrase": phrase
    }, f'End your answer with the exact phrase "{phrase}" and nothing after it.'


def _sample_start_word(rng, words):
    word = rng.choice(_OPENERS + tuple(word.capitalize() for word in words))
    return {"word": word}, f'Start your answer with the word "{word}".'


def _sample_bullets(rng, words):
    n = rng.choice((2, 3))
    return {
        "num_bullets": n
    }, f'Use exactly {n} bullet points, each on its own line starting with "* ".'


def _fixed(text: str):
    """A sampler for an instruction without arguments."""
    return lambda rng, words: ({}, text)


class _Spec(NamedTuple):
    """How to check and how to sample one kind."""

    checker: Callable[..., bool]
    kwarg_names: tuple[str, ...]
    sampler: Callable[[random.Random, Sequence[str]], tuple[dict, str]]


_SPECS: dict[str, _Spec] = {
    "length:max_words": _Spec(_max_words, ("max_words",), _sample_max_words),
    "length:max_sentences": _Spec(_max_sentences, ("max_sentences",), _sample_max_sentences),
    "format:no_commas": _Spec(_no_commas, (), _fixed("Do not use any commas in your answer.")),
    "keywords:include": _Spec(_include, ("keywords",), _sample_include),
    "keywords:forbidden": _Spec(_forbidden, ("forbidden_words",), _sample_forbidden),
    "case:lowercase": _Spec(
        _lowercase, (), _fixed("Write your entire answer in lowercase letters only.")
    ),
    "case:uppercase": _Spec(
        _uppercase, (), _fixed("Write your entire answer in capital letters only.")
    ),
    "change_case:uppercase_word_count": _Spec(
        _uppercase_word_count, ("min_count",), _sample_uppercase_word_count
    ),
    "startend:end_phrase": _Spec(_end_phrase, ("phrase",), _sample_end_phrase),
    "startend:start_word": _Spec(_start_word, ("word",), _sample_start_word),
    "startend:quotation": _Spec(
        _quotation, (), _fixed("Wrap your entire answer in double quotation marks.")
    ),
    "format:bullets": _Spec(_bullets, ("num_bullets",), _sample_bullets),
    "format:title": _Spec(
        _title,
        (),
        _fixed(
            "Give your answer a title wrapped in double angular brackets, such as <<my title>>."
        ),
    ),
    "format:json": _Spec(
        _json, (), _fixed('Write your entire answer as a JSON object, such as {"answer": "..."}.')
    ),
}

INSTRUCTION_KINDS: tuple[str, ...] = tuple(_SPECS)


def _spec(kind: str, caller: str) -> _Spec:
    if kind not in _SPECS:
        raise ValueError(
            f"{caller}: unknown instruction kind {kind!r}; known: {INSTRUCTION_KINDS}."
        )
    return _SPECS[kind]


def check(instruction: Instruction, response: str) -> bool:
    """Whether a response follows an instruction.

    The response is stripped of surrounding whitespace first; an empty response follows no
    instruction, not even "format:no_commas". Each kind's exact rule (and its edge cases) is the
    docstring of its checker, e.g. `_max_words`; words and sentences are counted by `split_words`
    and `split_sentences`.

    Args:
      instruction: the instruction; its kwargs must hold exactly the kind's arguments.
      response: the model's reply.

    Returns:
      True when the reply follows the instruction.

    Raises:
      ValueError: for an unknown kind or kwargs that are not the kind's arguments.

    Example:
      >>> no_commas = Instruction("format:no_commas", {}, "Do not use any commas in your answer.")
      >>> check(no_commas, " Sun and sand. "), check(no_commas, "Sun, sand."), check(no_commas, "  ")
      (True, False, False)
    """
    spec = _spec(instruction.kind, "check")
    if set(instruction.kwargs) != set(spec.kwarg_names):
        raise ValueError(
            f"check: {instruction.kind!r} takes kwargs {sorted(spec.kwarg_names)}, "
            f"got {sorted(instruction.kwargs)}."
        )
    text = response.strip()
    return bool(text) and spec.checker(text, **instruction.kwargs)


def sample_instruction(
    kind: str, rng: random.Random, *, topic: str, topic_words: Sequence[str] = ()
) -> Instruction:
    """A random instruction of one kind (random length caps, keywords, phrases, ...).

    Keywords (to include, to avoid, to start with) come from `topic_words`, or, when none are
    given, from the topic's own words of four or more letters.

    Args:
      kind: one of `INSTRUCTION_KINDS`.
      rng: the only source of randomness, so a seeded rng gives the same instruction.
      topic: what the answer is about, e.g. "a picnic".
      topic_words: a few lowercase words that fit the topic, e.g. ("basket", "ants").

    Returns:
      The instruction, with its sentence for the user.

    Example:
      >>> rng = random.Random(0)
      >>> sample_instruction("keywords:include", rng, topic="a picnic", topic_words=("ants",))
      Instruction(kind='keywords:include', kwargs={'keywords': ('ants',)}, text='Include the word "ants" in your answer.')
    """
    spec = _spec(kind, "sample_instruction")
    words = tuple(topic_words) or tuple(
        word.lower() for word in split_words(topic) if len(word) >= 4
    )
    if not words:
        raise ValueError(
            f"sample_instruction: no keywords for topic={topic!r}; pass topic_words "
            "or a topic with a word of four or more letters."
        )
    kwargs, text = spec.sampler(rng, words)
    return Instruction(kind, kwargs, text)


# Pairs of kinds that cannot (or, for a short reply, can hardly) both be followed. Two
# instructions of the same kind always conflict: the newer replaces the older.
_CONFLICTING_KINDS = frozenset(
    frozenset(pair)
    for pair in (
        ("case:lowercase", "case:uppercase"),
        ("case:lowercase", "change_case:uppercase_word_count"),
        ("length:max_words", "length:max_sentences"),  # one length cap at a time
        ("format:json", "format:bullets"),
        ("format:json", "format:title"),
        ("format:json", "startend:quotation"),
        ("format:json", "startend:end_phrase"),
        ("format:json", "startend:start_word"),
        ("startend:quotation", "startend:end_phrase"),  # both claim the last character
        ("startend:quotation", "format:bullets"),  # a quoted answer cannot open with a bullet
    )
)


def _required_texts(instruction: Instruction) -> tuple[str, ...]:
    """Texts that the response must contain to follow the instruction."""
    kwargs = instruction.kwargs
    if instruction.kind == "keywords:include":
        return tuple(kwargs["keywords"])
    if instruction.kind == "startend:start_word":
        return (kwargs["word"],)
    if instruction.kind == "startend:end_phrase":
        return (kwargs["phrase"],)
    return ()


def _one_way_conflict(a: Instruction, b: Instruction) -> bool:
    """Whether `a` forbids something that `b` requires."""
    required = _required_texts(b)
    if a.kind == "keywords:forbidden":
        return any(_contains_phrase(t, w) for t in required for w in a.kwargs["forbidden_words"])
    if a.kind == "format:no_commas":
        return any("," in t for t in required)
    return False


def conflicts(a: Instruction, b: Instruction) -> bool:
    """Whether two instructions should not be asked together.

    True for two instructions of the same kind (the newer replaces the older), for pairs of kinds
    that exclude each other (lowercase vs uppercase or vs capital words, two length caps, JSON vs
    bullets / title / quotes / start word / end phrase, quotes vs end phrase or bullets), for a
    banned word that another instruction requires (keyword, start word, end phrase), and for no
    commas vs a required text with a comma. Symmetric.

    Example:
      >>> lower = Instruction("case:lowercase", {}, "Write in lowercase.")
      >>> upper = Instruction("case:uppercase", {}, "Write in capitals.")
      >>> no_commas = Instruction("format:no_commas", {}, "No commas.")
      >>> conflicts(lower, upper), conflicts(upper, lower), conflicts(lower, no_commas)
      (True, True, False)
    """
    _spec(a.kind, "conflicts")
    _spec(b.kind, "conflicts")
    if a.kind == b.kind or frozenset((a.kind, b.kind)) in _CONFLICTING_KINDS:
        return True
    return _one_way_conflict(a, b) or _one_way_conflict(b, a)
