"""Pruning a sweep by issue 42's rule: a setting one of whose runs ends more than `max_drop`
points of held-out accuracy below its own best evaluation cannot become the default
(`jaxrl_llm.report.choose`), so its trials not yet started are skipped.

    skip = drop_pruner(trials, max_drop=3.0, across=("task.",))
    run_local(trials, skip=skip)   # a skipped trial ends with status "pruned"

A setting is a trial's overrides minus `seed` and minus the keys under `across` (the tasks it is
tried on): with `--seeds 0,1,2` on chain_sum and gcd, a seed of either task that falls from its
best disqualifies all six runs of its setting. The pruner reads the finished trials' metrics on
disk each time it is asked, so an interrupted sweep prunes the same trials when relaunched.
Pruned settings stay in the report as fewer seeds (a sketch) with the drop that disqualified
them; the best gain of a setting no seed of which fell is not affected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxrl_llm.launch_plan import Trial, is_finished
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.report import IGNORED_KEYS, config_key, drop_from_best, held_out_curve

__all__ = ["drop_pruner", "held_out_drop", "setting_of"]


def held_out_drop(workdir: str) -> float | None:
    """Points of held-out accuracy (`eval/accuracy`) between a run's best evaluation and its
    last, or None when it logged no evaluation."""
    curve = held_out_curve(read_metrics(workdir))
    return 100.0 * drop_from_best(curve) if curve else None


def setting_of(overrides: Mapping[str, Any], across: Sequence[str]) -> str:
    """A key of the overrides a trial shares with the other seeds and tasks of its setting (as
    `report.choose` joins groups into settings)."""
    return config_key(
        overrides, lambda k: k not in IGNORED_KEYS and not k.startswith(tuple(across))
    )


def drop_pruner(
    trials: Sequence[Trial], *, max_drop: float, across: Sequence[str] = ("task.",)
) -> Callable[[Trial], str | None]:
    """`skip(trial)`: why a trial is pruned (a finished run of its setting that ended more than
    `max_drop` points below its best, named), or None to run it.

    Raises:
      ValueError: max_drop not positive.
    """
    if not max_drop > 0:
        raise ValueError(
            f"launch: --prune_drop={max_drop} must be > 0 (points of held-out accuracy a run "
            "may end below its own best; issue 42's rule is 3)."
        )

    def skip(trial: Trial) -> str | None:
        setting = setting_of(trial.overrides, across)
        for other in trials:
            if setting_of(other.overrides, across) != setting or not is_finished(other):
                continue
            drop = held_out_drop(other.workdir)
            if drop is not None and drop > max_drop:
                return f"{other.name} ended {drop:.1f} points below its best (> {max_drop:g})"
        return None

    return skip
