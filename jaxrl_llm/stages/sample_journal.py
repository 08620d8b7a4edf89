"""The decode calls of a labelling pass, kept on disk so that a killed stage resumes.

The stages that label the policy's own samples (reward-model and preference pairs, the process
reward model's Monte Carlo step labels) make all their decode calls before they write their
label file: on chain_sum_steps the PRM stage makes ~130 calls of 64 rows, about an hour on 2 CPU
cores. A `SampleJournal` appends each call's completions to a JSONL file as it returns, keyed by
the call's seed and prompt rows; a rerun of the stage replays those calls from the file and
decodes only the ones the killed run had not finished. Each call is seeded on its own
(`TaskSampler.sample`), so the resumed pass labels the samples an uninterrupted one would.

    journal = SampleJournal("runs/prm/steps.jsonl.samples", {"temperature": 1.0, ...})
    sample = journal.wrap(sampler.sample)   # same signature; journaled when params is None
    ...                                     # write the labels, then delete the file

File format: line 1 `{"settings": {...}}` (what the samples depend on besides seed and rows:
the model config, temperature, length); then one `{"key": sha1, "completions": [...]}` per call.
A torn last line (the process killed mid-write) is dropped on reopening.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["SampleJournal", "journal_path"]


def journal_path(labels_path: str) -> str:
    """Where the journal of the pass that writes `labels_path` lives (beside it)."""
    return f"{labels_path}.samples"


def _canonical(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists, numbers stay numbers)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def call_key(rows: Sequence[Sequence[int]], seed: int) -> str:
    """The key of one decode call: a digest of its seed and prompt token rows."""
    text = json.dumps([int(seed), [[int(t) for t in row] for row in rows]])
    return hashlib.sha1(text.encode()).hexdigest()


def _record(line: str, *, first: bool) -> dict[str, Any] | None:
    """The journal record on `line` (the settings line when `first`), or None if it is not
    one (a line without its newline is torn)."""
    try:
        record = json.loads(line) if line.endswith("\n") else None
    except json.JSONDecodeError:
        return None
    fields = ("settings",) if first else ("key", "completions")
    if not isinstance(record, dict) or any(f not in record for f in fields):
        return None
    return record


class SampleJournal:
    """Completions of finished decode calls, on disk (module docstring).

    Args:
      path: the JSONL file; created when missing, replayed when present.
      settings: what the samples depend on besides seed and rows (JSON-serialisable).

    Raises:
      ValueError: the file holds samples drawn under other settings (naming the fields and the
        fix: delete the file to sample again), or a line other than the last is unreadable.
    """

    def __init__(self, path: str, settings: dict[str, Any]):
        self.path, self.settings = path, _canonical(settings)
        self.calls: dict[str, list[str]] = {}
        self.replayed = 0  # calls answered from the file by this object
        if not (os.path.isfile(path) and self._load()):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.dumps({"settings": self.settings}, sort_keys=True) + "\n")

    def _load(self) -> bool:
        """Reads the file's calls; False when it has no complete settings line (start anew)."""
        with open(path := self.path, encoding="utf-8") as f:
            lines = f.readlines()
        good_bytes = 0
        for number, line in enumerate(lines, start=1):
            record = _record(line, first=number == 1)
            if record is None:
                if number == len(lines):
                    break  # torn by a kill mid-write: dropped below
                raise ValueError(
                    f"{path}:{number}: not a journal line; delete the file to sample again."
                )
            if number == 1:
                self._check_settings(record["settings"])
            else:
                self.calls[record["key"]] = record["completions"]
            good_bytes += len(line.encode("utf-8"))
        if good_bytes == 0:
            return False
        with open(path, "r+b") as f:
            f.truncate(good_bytes)
        if self.calls:
            print(f"[jaxrl_llm] resuming: {len(self.calls)} decode calls already in {path}")
        return True

    def _check_settings(self, saved: Any) -> None:
        if saved == self.settings:
            return
        saved = saved if isinstance(saved, dict) else {}
        fields = sorted(
            k for k in set(saved) | set(self.settings) if saved.get(k) != self.settings.get(k)
        )
        raise ValueError(
            f"{self.path} holds samples drawn with other settings (differing: {', '.join(fields)}); "
            "delete it to sample again, or restore the settings it was drawn with."
        )

    def wrap(self, sample: Callable[..., list[str]]) -> Callable[..., list[str]]:
        """`sample(rows, seed, params=None) -> completions`, its calls with params=None journaled
        (calls with explicit params sample parameters that change between calls: passed through)."""

        def journaled(rows, seed, params=None):
            if params is not None:
                return sample(rows, seed, params)
            key = call_key(rows, seed)
            if key in self.calls:
                self.replayed += 1
                return list(self.calls[key])
            completions = list(sample(rows, seed))
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "completions": completions}) + "\n")
            self.calls[key] = completions
            return completions

        return journaled
