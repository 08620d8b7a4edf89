"""The labelling stages' decode calls kept on disk: a killed pass resumes where it stopped and
labels what an uninterrupted one would (`jaxrl_llm.stages.sample_journal`)."""

import json
import os

import pytest

from jaxrl_llm.rollout import chat
from jaxrl_llm.runners.components import load_policy
from jaxrl_llm.stages import load_config
from jaxrl_llm.stages.data import labelled_items
from jaxrl_llm.stages.process_reward_model import make_step_labels
from jaxrl_llm.stages.sample_journal import SampleJournal, journal_path
from tests.run_helpers import ROOT

SETTINGS = {"model": {"name": "m"}, "temperature": 1.0, "max_new_tokens": 8}


class CountingSampler:
    """A stand-in decode: completions named by seed and row; counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, rows, seed, params=None):
        self.calls += 1
        return [f"s{seed}-r{len(row)}-p{params}" for row in rows]


def test_a_reopened_journal_replays_finished_calls_without_decoding(tmp_path):
    path = str(tmp_path / "labels.jsonl.samples")
    first = CountingSampler()
    sample = SampleJournal(path, SETTINGS).wrap(first)
    a = sample([[1, 2], [3]], seed=5)
    b = sample([[1, 2], [3]], seed=6)
    assert first.calls == 2

    again = CountingSampler()
    journal = SampleJournal(path, SETTINGS)
    sample = journal.wrap(again)
    assert sample([[1, 2], [3]], seed=5) == a and sample([[1, 2], [3]], seed=6) == b
    assert again.calls == 0 and journal.replayed == 2
    assert sample([[1, 2], [4]], seed=5) == ["s5-r2-pNone", "s5-r1-pNone"]  # other rows: decoded
    assert again.calls == 1
    # calls with explicit parameters sample a changing policy: never journaled
    sample([[1]], seed=5, params="p1")
    sample([[1]], seed=5, params="p1")
    assert again.calls == 3


def test_a_torn_last_line_is_dropped_and_the_file_stays_readable(tmp_path):
    path = str(tmp_path / "labels.jsonl.samples")
    SampleJournal(path, SETTINGS).wrap(CountingSampler())([[1]], seed=0)
    with open(path, "a") as f:
        f.write('{"key": "abc", "completions": ["half')  # killed mid-write
    sampler = CountingSampler()
    journal = SampleJournal(path, SETTINGS)
    sample = journal.wrap(sampler)
    sample([[1]], seed=0)
    sample([[1]], seed=1)
    assert (sampler.calls, journal.replayed) == (1, 1)
    with open(path) as f:
        lines = [json.loads(line) for line in f]  # every line whole again
    assert len(lines) == 3 and "settings" in lines[0]
    # a torn settings line (killed as the file was created): started anew
    with open(path, "w") as f:
        f.write('{"settings": {"mod')
    SampleJournal(path, SETTINGS).wrap(CountingSampler())([[1]], seed=0)
    with open(path) as f:
        assert json.loads(f.readline()) == {"settings": SETTINGS}


def test_a_journal_of_other_settings_or_a_bad_line_is_refused_by_name(tmp_path):
    path = str(tmp_path / "labels.jsonl.samples")
    SampleJournal(path, SETTINGS).wrap(CountingSampler())([[1]], seed=0)
    with pytest.raises(ValueError, match=r"labels\.jsonl\.samples holds samples drawn with other "
                       r"settings \(differing: temperature\); delete it"):  # fmt: skip
        SampleJournal(path, {**SETTINGS, "temperature": 0.7})
    with open(path, "a") as f:
        f.write('["not", "a record"]\n{"key": "k", "completions": []}\n')
    with pytest.raises(ValueError, match=r"samples:3: not a journal line; delete the file"):
        SampleJournal(path, SETTINGS)


def test_labelled_items_deletes_the_journal_once_the_labels_are_written(tmp_path):
    config = load_config(os.path.join(ROOT, "experiments", "configs", "prm_tiny.py"))
    seen = []

    def make(path, journal):
        seen.append(journal)
        with open(journal, "w") as f:
            f.write("{}\n")
        with open(path, "w") as f:
            f.write("\n".join(json.dumps({"p": p}) for p in "abcd") + "\n")
        return {"made": 1}

    def read(path):
        with open(path) as f:
            return [json.loads(line)["p"] for line in f]

    split, stats = labelled_items(
        config, "prm", "steps", str(tmp_path), make=make, read=read,
        encode=lambda p: (p, p, [[1, 2]]),
    )  # fmt: skip
    path = str(tmp_path / "steps.jsonl")
    assert seen == [journal_path(path)] and stats == {"made": 1}
    assert not os.path.exists(seen[0]) and sorted(split.prompts) == list("abcd")


def test_a_killed_step_labelling_resumes_and_labels_as_an_uninterrupted_pass(
    tmp_path, monkeypatch, text_reward
):
    config = load_config(os.path.join(ROOT, "experiments", "configs", "prm_tiny.py"))
    with config.unlocked():
        config.prm.marker = " "  # random text has many: many step prefixes
        config.prm.rollouts = 16  # 4 prefixes a decode call: several calls
        config.prm.num_prompts, config.prm.max_new_tokens = 2, 8
    policy, tokenizer = load_policy(config)
    real = chat.completion_texts
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        if kill_at and len(calls) == kill_at:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(chat, "completion_texts", counted)
    kill_at = 0
    whole = str(tmp_path / "whole.jsonl")
    make_step_labels(config, policy, tokenizer, whole)  # no journal
    total = len(calls)
    assert total >= 4, "the pass should take several decode calls"  # 5 on 2026-11-29

    path, journal = str(tmp_path / "steps.jsonl"), str(tmp_path / "steps.jsonl.samples")
    calls.clear()
    kill_at = 3
    with pytest.raises(KeyboardInterrupt):
        make_step_labels(config, policy, tokenizer, path, journal)
    assert not os.path.exists(path)  # no half label file
    calls.clear()
    kill_at = 0
    make_step_labels(config, policy, tokenizer, path, journal)
    assert len(calls) == total - 2  # the two finished calls replayed, the killed one redone
    with open(whole) as a, open(path) as b:
        assert a.read() == b.read()
