"""Multi-turn instruction-following conversations in the style of Multi-IF, generated offline.

See "Multi-IF: Benchmarking LLMs on Multi-Turn and Multilingual Instructions Following" (He et al.
2024, 2410.15553). Turn 1 asks for a short text about an everyday topic plus some verifiable
instructions (`instructions.py`, after IFEval, 2311.07911); turns 2 and 3 ask to rewrite or
continue it with new instructions. As in Multi-IF the instructions accumulate: the reply to turn t
is checked against turn t's new instructions and every earlier one still in force; an earlier one
that conflicts with a new one is dropped, and the user says so. The reward of a reply is the
fraction of its turn's instructions that it follows (`score_turn`).

Sizes fit a small chat model (135M parameters, about 100 tokens a turn): the texts asked for are
short, and the instructions it can follow sometimes (lowercase, no commas, a keyword, an end
phrase, a word cap, ...) are drawn more often than the hard ones (JSON, capitals only).

Example:
  >>> conversation = make_conversations(1, seed=0)[0]
  >>> score_turn(conversation, 0, "")
  (0.0, [False])
"""

from __future__ import annotations

import random
from typing import NamedTuple

from jaxrl_llm.envs.instructions import (
    INSTRUCTION_KINDS,
    Instruction,
    check,
    conflicts,
    sample_instruction,
)

__all__ = [
    "KIND_WEIGHTS",
    "SPLITS",
    "TOPICS",
    "Conversation",
    "make_conversations",
    "score_turn",
    "topics_for_split",
]

SPLITS = ("train", "test")

# Everyday topics, each with a few lowercase words for keyword instructions. Every fifth topic
# (index 4, 9, ...) is a test topic; the rest are train topics (`topics_for_split`).
TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a rainy day", ("umbrella", "puddle", "clouds", "boots")),
    ("a day at the beach", ("sand", "waves", "sunscreen", "shells")),
    ("cooking breakfast", ("eggs", "toast", "coffee", "butter")),
    ("a walk in the park", ("trees", "bench", "ducks", "path")),
    ("your favourite season", ("autumn", "leaves", "sweater", "harvest")),
    ("learning to ride a bike", ("pedals", "balance", "helmet", "wheels")),
    ("a birthday party", ("cake", "candles", "balloons", "gifts")),
    ("a trip to the zoo", ("lions", "giraffe", "keeper", "monkeys")),
    ("your morning routine", ("alarm", "shower", "breakfast", "bus")),
    ("a snowy winter day", ("snowman", "sled", "mittens", "frost")),
    ("grocery shopping", ("cart", "apples", "list", "cashier")),
    ("a good book", ("pages", "chapter", "author", "story")),
    ("a pet dog", ("leash", "bark", "tail", "bone")),
    ("a pet cat", ("whiskers", "purr", "yarn", "nap")),
    ("a picnic", ("basket", "blanket", "sandwiches", "ants")),
    ("gardening", ("seeds", "soil", "tomatoes", "watering")),
    ("a train journey", ("station", "ticket", "window", "tracks")),
    ("a visit to your grandparents", ("cookies", "stories", "garden", "photos")),
    ("the first day of school", ("teacher", "backpack", "friends", "classroom")),
    ("a camping trip", ("tent", "campfire", "stars", "marshmallows")),
    ("baking bread", ("flour", "dough", "oven", "yeast")),
    ("a football match", ("goal", "referee", "fans", "stadium")),
    ("a city at night", ("lights", "traffic", "skyline", "taxis")),
    ("a thunderstorm", ("lightning", "thunder", "rain", "wind")),
    ("a lazy Sunday", ("couch", "pancakes", "movie", "pajamas")),
    ("a cup of tea", ("kettle", "mug", "honey", "steam")),
    ("moving to a new home", ("boxes", "keys", "neighbors", "furniture")),
    ("a music concert", ("stage", "guitar", "crowd", "songs")),
    ("a hike in the mountains", ("peaks", "trail", "backpack", "view")),
    ("cleaning the house", ("broom", "dust", "vacuum", "windows")),
    ("a farmers market", ("vegetables", "stalls", "bread", "honey")),
    ("riding the bus", ("driver", "seat", "stop", "ticket")),
    ("a sunny afternoon", ("shade", "lemonade", "breeze", "sunglasses")),
    ("writing a letter", ("pen", "envelope", "stamp", "paper")),
    ("a visit to the doctor", ("nurse", "appointment", "medicine", "waiting")),
    ("a library", ("shelves", "books", "quiet", "librarian")),
    ("playing board games", ("dice", "board", "cards", "turns")),
    ("a bakery", ("croissant", "bread", "smell", "baker")),
    ("a fishing trip", ("lake", "boat", "rod", "bait")),
    ("the ocean", ("waves", "whales", "salt", "tide")),
    ("a family dinner", ("table", "soup", "plates", "laughter")),
    ("a bicycle ride", ("helmet", "road", "hills", "wind")),
    ("a garden in spring", ("flowers", "bees", "tulips", "sunshine")),
    ("an old photograph", ("memories", "frame", "smile", "album")),
    ("a coffee shop", ("espresso", "barista", "cup", "chairs")),
    ("a school trip", ("bus", "museum", "lunch", "guide")),
    ("a rainy weekend indoors", ("puzzle", "tea", "blanket", "window")),
    ("a swimming pool", ("water", "diving", "towel", "lifeguard")),
    ("a farm", ("cows", "barn", "tractor", "hay")),
    ("a holiday by a lake", ("cabin", "canoe", "dock", "sunset")),
    ("starting a new hobby", ("practice", "paint", "patience", "fun")),
    ("flying in an airplane", ("pilot", "clouds", "seat", "luggage")),
    ("a street market", ("stalls", "fruit", "bargains", "noise")),
    ("a quiet evening at home", ("lamp", "book", "tea", "silence")),
    ("your favourite meal", ("pasta", "sauce", "cheese", "salad")),
    ("a mountain cabin in winter", ("fireplace", "snow", "cocoa", "logs")),
    ("a visit to a museum", ("paintings", "statues", "guide", "history")),
    ("a sunrise", ("sky", "orange", "birds", "dawn")),
    ("a visit to the dentist", ("toothbrush", "chair", "smile", "floss")),
    ("a lemonade stand", ("lemons", "sugar", "sign", "customers")),
)

# How often each kind is drawn: the kinds a 135M chat model follows sometimes come more often.
KIND_WEIGHTS: dict[str, float] = {
    "length:max_words": 3.0,
    "length:max_sentences": 2.0,
    "format:no_commas": 3.0,
    "keywords:include": 3.0,
    "keywords:forbidden": 2.0,
    "case:lowercase": 3.0,
    "case:uppercase": 1.0,
    "change_case:uppercase_word_count": 1.0,
    "startend:end_phrase": 3.0,
    "startend:start_word": 3.0,
    "startend:quotation": 2.0,
    "format:bullets": 2.0,
    "format:title": 1.0,
    "format:json": 0.5,
}

_FIRST_TURNS = (
    "Write a short text about {topic}.",
    "Tell me briefly about {topic}.",
    "Write a few lines about {topic}.",
    "Describe {topic} briefly.",
)
_LATER_TURNS = (
    "Rewrite your answer. My earlier instructions still apply. {new}",
    "Now rewrite your text. Everything I asked before still holds. {new}",
    "Continue your text with one more idea and give me the whole text again. "
    "My earlier instructions still apply. {new}",
)


class Conversation(NamedTuple):
    """One multi-turn conversation: the user's messages and the instructions each reply must follow.

    Attributes:
      id: unique within a split and seed, e.g. "train-0-00003".
      topic: what the texts are about, e.g. "a picnic".
      user_turns: the K user messages, each with its new instructions' sentences.
      turn_instructions: per turn, the instructions the reply to that turn is checked against:
        the earlier ones still in force (oldest first), then the turn's new ones.

    Example:
      >>> conversation = make_conversations(1, seed=0)[0]
      >>> len(conversation.user_turns) == len(conversation.turn_instructions) == 3
      True
    """

    id: str
    topic: str
    user_turns: tuple[str, ...]
    turn_instructions: tuple[tuple[Instruction, ...], ...]


def topics_for_split(split: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The topics of a split: every fifth topic of `TOPICS` is a test topic, the rest train.

    Train and test never share a topic, so they never share a (topic, instruction set) pair.

    Example:
      >>> len(topics_for_split("train")), len(topics_for_split("test"))
      (48, 12)
    """
    if split not in SPLITS:
        raise ValueError(f"topics_for_split: split={split!r} must be one of {SPLITS}.")
    is_test = split == "test"
    return tuple(topic for i, topic in enumerate(TOPICS) if (i % 5 == 4) == is_test)


def _weighted_order(rng: random.Random) -> list[str]:
    """All kinds in a random order, heavier kinds first more often (Efraimidis-Spirakis keys)."""
    keys = {kind: rng.random() ** (1.0 / weight) for kind, weight in KIND_WEIGHTS.items()}
    return sorted(INSTRUCTION_KINDS, key=lambda kind: -keys[kind])


def _new_instructions(rng, topic, words, active, count) -> list[Instruction]:
    """`count` new instructions: none conflicting with another new one, none already in force."""
    new: list[Instruction] = []
    for kind in _weighted_order(rng):
        candidate = sample_instruction(kind, rng, topic=topic, topic_words=words)
        if candidate in active or any(conflicts(candidate, other) for other in new):
            continue
        new.append(candidate)
        if len(new) == count:
            return new
    raise ValueError(
        f"make_conversations: {len(active)} instructions in force leave room for only {len(new)} "
        f"of {count} new ones; ask for fewer turns or instructions per turn."
    )


def _make_conversation(rng, conversation_id, topics, num_turns, per_turn) -> Conversation:
    topic, words = rng.choice(topics)
    active: list[Instruction] = []
    user_turns, turn_instructions = [], []
    for turn in range(num_turns):
        new = _new_instructions(rng, topic, words, active, per_turn)
        dropped = [old for old in active if any(conflicts(old, n) for n in new)]
        active = [old for old in active if old not in dropped] + new
        texts = " ".join(instruction.text for instruction in new)
        if turn == 0:
            message = rng.choice(_FIRST_TURNS).format(topic=topic) + " " + texts
        else:
            message = rng.choice(_LATER_TURNS).format(new=texts)
        for old in dropped:
            message += f" This replaces my earlier instruction: {old.text}"
        user_turns.append(message)
        turn_instructions.append(tuple(active))
    return Conversation(conversation_id, topic, tuple(user_turns), tuple(turn_instructions))


def make_conversations(
    count: int,
    *,
    seed: int,
    num_turns: int = 3,
    instructions_per_turn: int = 1,
    split: str = "train",
) -> list[Conversation]:
    """Generated Multi-IF-style conversations, the same for the same (count, seed, split).

    Conversation i depends only on (seed, split, i), so a smaller count gives a prefix of a
    larger one. Each draws a topic of its split, then per turn `instructions_per_turn` new
    instructions that do not conflict with each other (weighted by `KIND_WEIGHTS`). An
    instruction already in force is never asked again; the ValueError for running out of new
    ones is a guard only (a test finds none in 300 conversations of 30 turns of 3, per split).

    Args:
      count: how many conversations (>= 0).
      seed: any int.
      num_turns: user turns per conversation (>= 1).
      instructions_per_turn: new instructions per turn (1 to 3).
      split: "train" or "test"; their topics are disjoint (`topics_for_split`).

    Returns:
      `count` conversations with ids f"{split}-{seed}-{i:05d}".

    Example:
      >>> [c.id for c in make_conversations(2, seed=7, split="test")]
      ['test-7-00000', 'test-7-00001']
    """
    topics = topics_for_split(split)
    if count < 0:
        raise ValueError(f"make_conversations: count={count} must be >= 0.")
    if num_turns < 1:
        raise ValueError(f"make_conversations: num_turns={num_turns} must be >= 1.")
    if not 1 <= instructions_per_turn <= 3:
        raise ValueError(
            f"make_conversations: instructions_per_turn={instructions_per_turn} must be in [1, 3]."
        )
    return [
        _make_conversation(
            random.Random(f"multi-if/{split}/{seed}/{i}"),  # str seeds hash stably (sha512)
            f"{split}-{seed}-{i:05d}",
            topics,
            num_turns,
            instructions_per_turn,
        )
        for i in range(count)
    ]


def score_turn(conversation: Conversation, turn: int, response: str) -> tuple[float, list[bool]]:
    """The reward of a reply: the fraction of its turn's instructions that it follows.

    Args:
      conversation: the conversation.
      turn: 0-based index of the user turn that `response` answers.
      response: the model's reply to that turn.

    Returns:
      (fraction followed in [0, 1], each instruction's verdict in `turn_instructions[turn]` order).

    Example:
      >>> lower = Instruction("case:lowercase", {}, "Write in lowercase.")
      >>> cap = Instruction("length:max_words", {"max_words": 3}, "At most 3 words.")
      >>> conversation = Conversation("x", "a picnic", ("Hi.",), ((lower, cap),))
      >>> score_turn(conversation, 0, "ants ate our sandwiches")
      (0.5, [True, False])
    """
    num_turns = len(conversation.turn_instructions)
    if not 0 <= turn < num_turns:
        raise ValueError(
            f"score_turn: turn={turn} must be in [0, {num_turns}) for {conversation.id}."
        )
    instructions = conversation.turn_instructions[turn]
    if not instructions:
        raise ValueError(f"score_turn: turn {turn} of {conversation.id} has no instructions.")
    verdicts = [check(instruction, response) for instruction in instructions]
    return sum(verdicts) / len(verdicts), verdicts
