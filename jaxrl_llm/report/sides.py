"""Which side of the split and which held-out scorer a report's figures come from.

Tables read the test side, choices the selection side (`jaxrl_llm.report`); every run carries
its scorer (`report.Run.scorer`, `evals.scorer_of_run`). This module words the header line that
says both, refuses comparisons across scorers, and counts the right answers that came from cut
completions. The runs here are `report.Run`s (their `workdir`, `scorer`, `side`, `correct`,
`truncated` and `final_step`); the rows are `report.summarize`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jaxrl_llm.evals.scorers import SCORERS

__all__ = ["SIDE_NOTES", "check_one_scorer", "cut_share", "sides_and_scorers"]

# What each side of the split means in a report's header.
SIDE_NOTES = {
    "test": "test: questions that chose nothing (settings are chosen and sweeps pruned on the "
    "selection side)",
    "selection": "selection: the questions settings are chosen by, not a reported result",
    "held_out": "held_out: the one held-out side of runs made before the split had a selection "
    "side (the same questions may have chosen the setting)",
}


def cut_share(runs: Sequence[Any]) -> float | None:
    """The share of the right answers of the runs' last evaluations that came from completions
    cut at the token limit (pooled over seeds); None where a run kept no truncation flags."""
    if not all(r.final_step in r.truncated and r.final_step in r.correct for r in runs):
        return None
    right = sum(int(r.correct[r.final_step].sum()) for r in runs)
    cut = sum(int((r.correct[r.final_step] & r.truncated[r.final_step]).sum()) for r in runs)
    return cut / right if right else 0.0


def check_one_scorer(option: str, runs: Sequence[Any]) -> str:
    """The scorer all `runs` were measured with, else a ValueError naming `option`, the field
    (`eval.scorer`), each scorer's runs and the fix: two rulers make no difference."""
    by_scorer: dict[str, list[str]] = {}
    for run in runs:
        by_scorer.setdefault(run.scorer, []).append(run.workdir)
    if len(by_scorer) > 1:
        listed = "; ".join(f"{name}: {', '.join(dirs[:2])}" + (" ..." if len(dirs) > 2 else "")
                           for name, dirs in by_scorer.items())  # fmt: skip
        raise ValueError(
            f"{option}: the runs were scored differently (eval.scorer: {listed}); compare runs "
            "of one held-out scorer: run them again with the same config.eval.scorer."
        )
    return next(iter(by_scorer), "")


def sides_and_scorers(rows: Sequence[Mapping[str, Any]]) -> str:
    """The header line naming the side of the split the figures come from and the held-out
    scorer(s) that measured them (per group where they differ)."""
    sides = sorted({run.side for row in rows for run in row["runs"]})
    side_text = "; ".join(SIDE_NOTES[side] for side in sides)
    scorers = {row["label"]: sorted({run.scorer for run in row["runs"]}) for row in rows}
    names = sorted({name for names in scorers.values() for name in names})
    if len(names) == 1:
        known = SCORERS.get(names[0])
        scorer_text = names[0] + (f" ({known.description})" if known else "")
    else:
        scorer_text = "they differ between groups, which are then not comparable: " + "; ".join(
            f"{label}: {', '.join(names)}" for label, names in scorers.items()
        )
    return f"Side: {side_text}. Scorer: {scorer_text}."
