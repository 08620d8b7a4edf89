"""Held-out scorers: one ruler for every recipe, apart from the reward that trains.

A training reward may be shaped (partial credit, chance correction, a format bonus, the "stated"
or "last_number" answer rule of `config.rewards.answer_rule`), and two recipes with two answer
rules would otherwise be measured with two rulers: on the base model's step-0 gcd answers, 23 of
200 are right when the last number counts and 7 when only a stated answer does. The held-out
evaluation therefore reads `config.eval.scorer`, a name in this registry, whatever the recipe:

    stated            the task's reference check of the stated answer (the default); a completion
                      cut at the token limit has stated no answer and scores 0
    stated_cut_scored the same, but a cut completion is scored like any other (what runs with
                      `rewards.answer_rule="stated"` were measured with before this scorer)
    last_number       the last number of the completion, cut or not (what runs with
                      `rewards.answer_rule="last_number"` were measured with before)

A scorer is `(prompt, completion, example) -> score` (1.0 right, partial credit below) run under
the time-limited `RewardRunner`, plus its answer rule (what maj@k votes over and what the kept
records show) and its policy for cut completions. A researcher's own correctness function is
registered once and named in the config:

    register_scorer("exact_text", HeldOutScorer(
        correct=lambda prompt, completion, example: float(completion.strip() == example.answer),
        answer_rule="last_number", cut_completions="scored", description="the whole text"))
    --config.eval.scorer=exact_text

Runs written before the field existed were scored by their training rule with cut completions
counted: `scorer_of_run` names that scorer, so reports refuse to compare them with runs of
another scorer.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from jaxrl_llm.data import Example
from jaxrl_llm.rewards import RewardRunner, check_answer_rule, task_reward

__all__ = [
    "CUT_POLICIES",
    "DEFAULT_SCORER",
    "SCORERS",
    "HeldOutScorer",
    "get_scorer",
    "register_scorer",
    "scorer_of_run",
]

# What a scorer does with a completion cut at the token limit (no end of turn): "no_answer" scores
# it 0 (it stated nothing: the last number of rambling text is no answer), "scored" scores it as
# any other completion.
CUT_POLICIES = ("no_answer", "scored")
DEFAULT_SCORER = "stated"


@dataclasses.dataclass(frozen=True)
class HeldOutScorer:
    """How held-out completions are scored.

    Attributes:
      correct: `(prompt, completion, example) -> float` in [0, 1]; 1.0 is a right answer
        (accuracy counts those), below 1 partial credit (the "score" metric averages it).
      answer_rule: how the answer is read for maj@k votes and the kept records
        (`jaxrl_llm.rewards.ANSWER_RULES`).
      cut_completions: "no_answer" or "scored" (`CUT_POLICIES`).
      description: one line for listings and report headers.
    """

    correct: Callable[[str, str, Example], float]
    answer_rule: str = "stated"
    cut_completions: str = "no_answer"
    description: str = ""

    def __post_init__(self):
        if not callable(self.correct):
            raise TypeError(f"HeldOutScorer.correct must be callable, got {self.correct!r}.")
        check_answer_rule(self.answer_rule, field="HeldOutScorer.answer_rule")
        if self.cut_completions not in CUT_POLICIES:
            raise ValueError(
                f"HeldOutScorer.cut_completions={self.cut_completions!r} must be one of "
                f"{CUT_POLICIES}."
            )

    def runner(self, *, timeout_s: float | None = 5.0) -> RewardRunner:
        """A `RewardRunner` whose only function, "task", is this scorer (time-limited: a
        user's correctness function that hangs scores 0 and is counted)."""
        return RewardRunner(
            {"task": self.correct}, timeout_s=timeout_s, answer_rule=self.answer_rule
        )


def _task_check(rule: str) -> Callable[[str, str, Example], float]:
    return functools.partial(task_reward, rule=rule)


_SCORERS: dict[str, HeldOutScorer] = {
    "stated": HeldOutScorer(
        _task_check("stated"),
        "stated",
        "no_answer",
        "the task's check of the stated answer; a cut completion states none",
    ),
    "stated_cut_scored": HeldOutScorer(
        _task_check("stated"),
        "stated",
        "scored",
        "the task's check of the stated answer; cut completions scored too",
    ),
    "last_number": HeldOutScorer(
        _task_check("last_number"),
        "last_number",
        "scored",
        "the task's check of the last number; cut completions scored too",
    ),
}
# The registered scorers by name (a read-only view; `register_scorer` adds more).
SCORERS: Mapping[str, HeldOutScorer] = MappingProxyType(_SCORERS)


def register_scorer(name: str, scorer: HeldOutScorer, *, replace: bool = False) -> None:
    """Adds `scorer` under `name` (a user's correctness function, named in `config.eval.scorer`).

    Raises:
      ValueError: `name` is taken (pass `replace=True` to mean it) or not a plain name.
      TypeError: `scorer` is not a `HeldOutScorer`.
    """
    if not isinstance(scorer, HeldOutScorer):
        raise TypeError(f"register_scorer({name!r}, ...) takes a HeldOutScorer, got {scorer!r}.")
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"register_scorer: {name!r} is not a name (letters, digits, _ and -).")
    if name in _SCORERS and not replace:
        raise ValueError(
            f"register_scorer: {name!r} is registered already; pass replace=True to replace it."
        )
    _SCORERS[name] = scorer


def get_scorer(name: str, *, field: str = "config.eval.scorer") -> HeldOutScorer:
    """The scorer registered as `name`, else a ValueError in one line naming `field` and the
    registered names (a user's scorer must be registered first: `--import` its module).

    Example:
      >>> get_scorer("stated").cut_completions
      'no_answer'
    """
    if name not in _SCORERS:
        raise ValueError(
            f"{field}={name!r} is not a held-out scorer; set it to one of {sorted(_SCORERS)}, or "
            "register yours with jaxrl_llm.evals.register_scorer in a module the run imports."
        )
    return _SCORERS[name]


def scorer_of_run(config: Mapping[str, Any]) -> str:
    """The name of the scorer a run's held-out figures were measured with, from its config
    (a dict, as `config.json` holds it): `eval.scorer`, or for a run written before that field,
    the scorer equal to what it used: its `rewards.answer_rule` with cut completions scored.

    Example:
      >>> scorer_of_run({"eval": {"scorer": "stated"}, "rewards": {"answer_rule": "last_number"}})
      'stated'
      >>> scorer_of_run({"rewards": {"answer_rule": "stated"}})
      'stated_cut_scored'
    """
    named = (config.get("eval") or {}).get("scorer")
    if named:
        return str(named)
    rule = (config.get("rewards") or {}).get("answer_rule", "last_number")
    return "stated_cut_scored" if rule == "stated" else "last_number"
