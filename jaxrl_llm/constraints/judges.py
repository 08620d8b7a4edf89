"""Judges: functions of (prompt, completion, example) that flag a constraint violation.

CGPO (Xu et al. 2024, "The Perfect Blend: Redefining RLHF with Mixture of Judges",
arXiv:2409.20370) keeps a policy inside constraints that a *mixture of judges* checks: rule-based
ones (format, length, repetition, a verifier) and LLM judges. Here a judge returns a `Verdict`
(violated or not, and why); `JudgeMixture` runs several over a batch with the reward runner's
time limits and error handling, each on the prompt sources it applies to, and returns a
[K, B] matrix of violations with NaN for "no verdict" (a judge that raised, timed out, or does not
apply to that sample's source), which constrained optimizers treat as "not violated" and count.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from jaxrl_llm.data import Example
from jaxrl_llm.rewards import RewardRunner

__all__ = [
    "FormatJudge",
    "JudgeMixture",
    "JudgeOutput",
    "LengthJudge",
    "RegexJudge",
    "RepetitionJudge",
    "Verdict",
    "VerifierJudge",
]


class Verdict(NamedTuple):
    """One judge's call on one completion: `violated`, and a short `reason` when it is."""

    violated: bool
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class LengthJudge:
    """Violated when the completion is longer than `max_chars` characters (or `max_words`
    whitespace-separated words; 0 disables that limit)."""

    max_chars: int = 0
    max_words: int = 0

    def __call__(self, prompt: str, completion: str, example: Example) -> Verdict:
        if self.max_chars and len(completion) > self.max_chars:
            return Verdict(True, f"{len(completion)} characters > {self.max_chars}")
        words = len(completion.split())
        if self.max_words and words > self.max_words:
            return Verdict(True, f"{words} words > {self.max_words}")
        return Verdict(False)


@dataclasses.dataclass(frozen=True)
class FormatJudge:
    """Violated unless the stripped completion matches `pattern` (a regex, `re.fullmatch`;
    e.g. r"The answer is -?\\d+\\." for the answer format the task's prompt asks for)."""

    pattern: str

    def __call__(self, prompt: str, completion: str, example: Example) -> Verdict:
        if re.fullmatch(self.pattern, completion.strip(), flags=re.DOTALL):
            return Verdict(False)
        return Verdict(True, f"does not match {self.pattern!r}")


@dataclasses.dataclass(frozen=True)
class RegexJudge:
    """Violated when `pattern` occurs anywhere in the completion (`re.search`)."""

    pattern: str

    def __call__(self, prompt: str, completion: str, example: Example) -> Verdict:
        found = re.search(self.pattern, completion)
        return Verdict(True, f"contains {found.group(0)!r}") if found else Verdict(False)


@dataclasses.dataclass(frozen=True)
class RepetitionJudge:
    """Violated when some word n-gram occurs more than `max_repeats` times (degenerate loops)."""

    n: int = 3
    max_repeats: int = 2

    def __call__(self, prompt: str, completion: str, example: Example) -> Verdict:
        words = completion.split()
        grams = collections.Counter(
            tuple(words[i : i + self.n]) for i in range(len(words) - self.n + 1)
        )
        if grams:
            gram, count = grams.most_common(1)[0]
            if count > self.max_repeats:
                return Verdict(True, f"{' '.join(gram)!r} x{count}")
        return Verdict(False)


@dataclasses.dataclass(frozen=True)
class VerifierJudge:
    """Violated when `reward(prompt, completion, example)` is below `threshold` (e.g. the task's
    verifier: a wrong answer is a violation, CGPO's "correctness" judge)."""

    reward: Callable[[str, str, Example], float]
    threshold: float = 0.5

    def __call__(self, prompt: str, completion: str, example: Example) -> Verdict:
        score = float(self.reward(prompt, completion, example))
        return Verdict(True, f"score {score:g}") if score < self.threshold else Verdict(False)


def any_violated(violations_kb: np.ndarray) -> np.ndarray:
    """bool [B]: some judge says violated in float [K, B] verdicts (1 / 0, NaN = no verdict,
    which counts as not violated)."""
    return np.nan_to_num(np.asarray(violations_kb), nan=0.0).max(axis=0, initial=0.0) > 0


class JudgeOutput(NamedTuple):
    """Verdicts of K judges on B completions.

    Attributes:
      names: the K judge names.
      violations: float32 [K, B]: 1 violated, 0 not, NaN no verdict (failed or not applicable).
      num_failed: name -> calls that raised, timed out or returned something else than a
        verdict (their samples have no verdict).
    """

    names: tuple[str, ...]
    violations: np.ndarray
    num_failed: dict[str, int]

    def violated(self) -> np.ndarray:
        """bool [B]: some judge with a verdict says violated (see `any_violated`)."""
        return any_violated(self.violations)

    def metrics(self, prefix: str = "judge") -> dict[str, float]:
        """Per judge: the violation rate over samples with a verdict, and failed calls."""
        out = {}
        for k, name in enumerate(self.names):
            row = self.violations[k]
            judged = row[~np.isnan(row)]
            out[f"{prefix}/{name}/violation_rate"] = float(judged.mean()) if judged.size else 0.0
            out[f"{prefix}/{name}/no_verdict"] = float(np.isnan(row).sum())
        any_violated = self.violated()
        out[f"{prefix}/any_violation_rate"] = (
            float(any_violated.mean()) if any_violated.size else 0.0
        )
        return out


# A judge runs as a reward-runner function scoring +1 (violated) or -1 (not): the runner scores
# a call that raised or timed out 0, which is how "no verdict" is told apart.
_VIOLATED, _SATISFIED = 1.0, -1.0


def _as_violation(judge) -> Callable[[str, str, Example], float]:
    """A reward-runner function scoring a judge's verdict (a bool or a `Verdict`) +1 / -1;
    anything else raises, so the runner counts the call as failed."""

    def violation(prompt: str, completion: str, example: Example) -> float:
        verdict = judge(prompt, completion, example)
        if isinstance(verdict, Verdict):
            verdict = verdict.violated
        if not isinstance(verdict, bool | np.bool_):
            raise TypeError(f"a judge returned {type(verdict).__name__}, not a Verdict or bool")
        return _VIOLATED if verdict else _SATISFIED

    return violation


class JudgeMixture:
    """Several judges over a batch, each applied to the prompt sources it is meant for.

    Args:
      judges: name -> judge (`(prompt, completion, example) -> Verdict | bool`).
      sources: name -> the `Example.source` values the judge applies to (absent or None: all),
        CGPO's per-task mixture.
      timeout_s: per-call time limit (`RewardRunner`'s; None runs calls inline).

    Example:
      >>> mixture = JudgeMixture({"length": LengthJudge(max_words=20),
      ...                         "format": FormatJudge(r"The answer is -?\\d+\\.")})
      >>> out = mixture(prompts, completions, examples)    # JudgeOutput, violations [2, B]
    """

    def __init__(
        self,
        judges: Mapping[str, Callable],
        *,
        sources: Mapping[str, Sequence[str] | None] | None = None,
        timeout_s: float | None = 10.0,
    ):
        if not judges:
            raise ValueError("JudgeMixture needs at least one judge.")
        unknown = sorted(set(sources or {}) - set(judges))
        if unknown:
            raise ValueError(f"JudgeMixture: sources names judges {unknown} that do not exist.")
        self.names = tuple(judges)
        self.sources = {n: (None if not s else frozenset(s)) for n, s in (sources or {}).items()}
        # Batched judges (an `LLMJudge`) score a whole batch at once and handle their own
        # failures; the others run per sample under the reward runner's time limit.
        self._batched = {n: j for n, j in judges.items() if getattr(j, "batched", False)}
        per_sample = {n: _as_violation(j) for n, j in judges.items() if n not in self._batched}
        self._runner = RewardRunner(per_sample, timeout_s=timeout_s) if per_sample else None

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Example]
    ) -> JudgeOutput:
        out = self._runner(prompts, completions, examples) if self._runner else None
        rows, failed = [], {}
        for name in self.names:
            if name in self._batched:
                row = np.asarray(
                    self._batched[name].judge_batch(prompts, completions, examples), np.float32
                ).copy()
                failed[name] = int(np.isnan(row).all()) * len(row)
            else:
                scores = np.asarray(out.per_function[name], np.float32)
                row = np.where(scores == _VIOLATED, 1.0, 0.0).astype(np.float32)
                row[scores == 0.0] = math.nan  # raised, timed out or returned a non-verdict
                failed[name] = out.num_errors.get(name, 0) + out.num_timeouts.get(name, 0)
            applies = self.sources.get(name)
            if applies is not None:
                row[[e.source not in applies for e in examples]] = math.nan
            rows.append(row)
        return JudgeOutput(self.names, np.stack(rows), failed)
