"""The data of the supervised stages: labelled items by prompt, batches by update step.

    split, stats = labelled_items(config, "rm", "pairs", workdir, make=make,
                                  read=read_pairs_jsonl, encode=encode)
    indices = step_indices(config.seed, step, batch_size, len(split.train))   # resumable
    batches = RecordBatches(records, tokenizer, learner, config, config.sft)   # SFT records

Items are held out by prompt (`split_by_group`): several labelled completions of one prompt
never sit on both sides of the split.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_llm.roles import Learner, place_batch
from jaxrl_llm.stages.sample_journal import journal_path
from jaxrl_llm.training.sft import make_sft_batch, tokenize_records

__all__ = [
    "PromptSplit",
    "RecordBatches",
    "labelled_items",
    "padded_width",
    "record_options",
    "split_by_group",
    "step_indices",
]


def step_indices(seed: int, step: int, batch_size: int, count: int) -> np.ndarray:
    """The `batch_size` example indices of update `step`: consecutive slices of a permutation
    of range(count) drawn anew each epoch from (seed, epoch), so a resumed run draws the same.

    Example:
      >>> step_indices(0, 0, 4, 10).shape
      (4,)
    """
    epoch, start = divmod(step * batch_size, count)
    order = np.random.default_rng([seed, epoch]).permutation(count)
    return np.resize(np.roll(order, -start), batch_size)


def padded_width(lengths, *, limit: int, multiple: int = 16) -> int:
    """The one row width of a stage's batches: the longest row rounded up to `multiple`, at
    most `limit` (the config's max_length). Padding every row to the limit instead costs a
    short-sequence task like chain_sum (about 70 tokens a pair) over 3x the compute.

    Example:
      >>> padded_width([40, 70], limit=256)
      80
    """
    return min(limit, -(-max(lengths) // multiple) * multiple)


def split_by_group(groups: list, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Indices (held out, training) of items whose `groups` keys (e.g. prompt texts) are split
    so that no key has items on both sides: about `fraction` of the distinct keys, at least
    one and (given two keys) at most all but one, are held out, chosen by a permutation seeded
    with `seed`. Several pairs (or completions) of one prompt, or a prompt the task repeats,
    thus never leak from training into the held-out figure."""
    keys = list(dict.fromkeys(groups))
    order = np.random.default_rng(seed).permutation(len(keys))
    count = min(max(1, int(round(fraction * len(keys)))), max(1, len(keys) - 1))  # both sides
    held_keys = {keys[i] for i in order[:count]}
    held = [i for i, g in enumerate(groups) if g in held_keys]
    train = [i for i, g in enumerate(groups) if g not in held_keys]
    return held, train


class PromptSplit(NamedTuple):
    """Encoded items that fit the stage's `max_length`, split by prompt.

    Attributes:
      path: the file the items were read from.
      encoded: every kept item, encoded.
      prompts: each kept item's prompt.
      held, train: indices into `encoded` of the held-out and training items.
      width: the row width of the stage's batches (`padded_width` of every kept sequence).
      dropped: items left out as longer than `max_length`.
    """

    path: str
    encoded: list
    prompts: list[str]
    held: list[int]
    train: list[int]
    width: int
    dropped: int

    def items(self, indices: Sequence[int]) -> list:
        """The encoded items at `indices`."""
        return [self.encoded[i] for i in indices]


def labelled_items(
    config,
    section: str,
    labels: str,
    workdir: str,
    *,
    make: Callable[[str, str], dict[str, float]],
    read: Callable[[str], Sequence[Any]],
    encode: Callable[[Any], tuple[str, Any, Sequence[Sequence[int]]]],
) -> tuple[PromptSplit, dict[str, float]]:
    """The labelled items a stage trains on, encoded and split by prompt.

    They are read (`read(path)`) from the file `config.<section>.<labels>`, or from
    `<workdir>/<labels>.jsonl`, which `make(path, journal)` writes first unless an earlier run of
    the stage did; `make` keeps its decode calls in the file `journal` (`SampleJournal`), so that
    a run killed while labelling resumes there, and the journal is deleted once `path` is
    written. Items with a sequence longer than `config.<section>.max_length` are dropped;
    `config.<section>.eval_fraction` of the prompts are held out (`split_by_group`, seeded with
    `config.seed`).

    Args:
      config, section, labels: the stage config, its section and the section's file field.
      workdir: the stage's directory.
      make: `(path, journal) -> counts`: samples, labels and writes the items.
      read: `path -> items`.
      encode: `item -> (prompt, encoded item, its token sequences)`.

    Returns:
      (the `PromptSplit`, `make`'s counts when it ran here, else {}).

    Raises:
      ValueError: the kept items hold fewer than two prompts (one is held out).
    """
    s = config[section]
    path = s[labels] or os.path.join(workdir, f"{labels}.jsonl")
    stats = {}
    if not (s[labels] or os.path.isfile(path)):
        journal = journal_path(path)
        stats = make(path, journal)
        if os.path.isfile(journal):
            os.remove(journal)
    encoded, prompts, sequences, dropped = [], [], [], 0
    for item in read(path):
        prompt, value, ids = encode(item)
        if max(len(x) for x in ids) > s.max_length:
            dropped += 1
            continue
        encoded.append(value)
        prompts.append(prompt)
        sequences += ids
    if len(set(prompts)) < 2:
        raise ValueError(
            f"{path}: the items that fit config.{section}.max_length={s.max_length} ({dropped} "
            f"do not) hold {len(set(prompts))} prompt(s); one prompt's items are held out, so at "
            f"least two prompts are needed: sample more (config.{section}.num_prompts) or give a "
            "larger file."
        )
    held, train = split_by_group(prompts, s.eval_fraction, config.seed)
    width = padded_width([len(x) for x in sequences], limit=s.max_length)
    return PromptSplit(path, encoded, prompts, held, train, width, dropped), stats


def record_options(config, section) -> dict[str, Any]:
    """`tokenize_records`' options of SFT records under a stage's `section` (its max_length)
    and the run's prompt format (`config.task`)."""
    return dict(
        max_length=section.max_length,
        system_prompt=config.task.system_prompt,
        instruction_suffix=config.task.instruction_suffix,
    )


class RecordBatches:
    """The placed `SftBatch` of each update step over SFT records: epochs of a permutation
    seeded with `config.seed` (`step_indices`), each record tokenized on first use.

    Args:
      records: the `SftRecord`s.
      tokenizer: the policy's tokenizer.
      learner: the `Learner` whose mesh the batches are placed on.
      config: the stage config (seed, prompt format).
      section: the stage's section: batch_size, max_length (row width), pack,
        pack_row_multiple.
    """

    def __init__(self, records: Sequence[Any], tokenizer, learner: Learner, config, section):
        self.records, self.tokenizer, self.learner = records, tokenizer, learner
        self.seed, self.section = config.seed, section
        self.options = record_options(config, section)
        self.pad_id = tokenizer.pad_token_id or 0
        self._sequences: dict[int, Any] = {}  # record index -> SftSequence, on first use

    def __call__(self, step: int):
        """Update `step`'s records as a placed `SftBatch`."""
        s = self.section
        indices = step_indices(self.seed, step, s.batch_size, len(self.records))
        chosen = [self._sequence(int(i)) for i in indices]
        batch = make_sft_batch(
            chosen, pad_id=self.pad_id, width=s.max_length, pack=s.pack,
            row_multiple=s.pack_row_multiple,
        )  # fmt: skip
        return place_batch(batch, self.learner.mesh, self.learner.rules)

    def _sequence(self, index: int):
        if index not in self._sequences:
            record = self.records[index]
            (self._sequences[index],) = tokenize_records(self.tokenizer, [record], **self.options)
        return self._sequences[index]
