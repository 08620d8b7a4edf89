"""Pruning a sweep by the rule a new default must meet: a setting one of whose runs ends more than `max_drop`
points of held-out accuracy below its own best evaluation (on the selection side of the split,
so that the test side a report shows chose nothing; a run made before that side existed is read
on its one held-out side) cannot become the default
(`jaxrl_llm.report.choice.choose`), so its trials not yet started are skipped; with
`min_entropy_ratio`, so is a setting one of whose runs keeps less than that share of its first
sampled-token entropy (a new default must keep a third), and with
`max_entropy_ratio` one of whose runs ends above that multiple of it (an entropy blow-up: the
samples turn to noise while the greedy answers may still improve).

    skip = setting_pruner(trials, max_drop=3.0, min_entropy_ratio=1 / 3, across=("task.",))
    run_local(trials, skip=skip)   # a skipped trial ends with status "pruned"

A setting is a trial's overrides minus `seed` and minus the keys under `across` (the tasks it is
tried on): with `--seeds 0,1,2` on chain_sum and gcd, a seed of either task that falls from its
best disqualifies all six runs of its setting. The pruner reads the finished trials' metrics on
disk each time it is asked, so an interrupted sweep prunes the same trials when relaunched.
Pruned settings stay in the report as fewer seeds (a sketch) with the drop or entropy that
disqualified them; the best gain of a setting no seed of which fell is not affected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxrl_llm.launch.plan import Trial, is_finished
from jaxrl_llm.metrics import read_metrics
from jaxrl_llm.report.rules import (
    IGNORED_KEYS,
    choice_curve,
    config_key,
    drop_from_best,
    entropy_ratio,
    exceeds,
    sampled_entropy,
)

__all__ = ["setting_of", "setting_pruner"]


def setting_of(overrides: Mapping[str, Any], across: Sequence[str]) -> str:
    """A key of the overrides a trial shares with the other seeds and tasks of its setting (as
    `report.choice.choose` joins groups into settings)."""
    return config_key(
        overrides, lambda k: k not in IGNORED_KEYS and not k.startswith(tuple(across))
    )


def setting_pruner(
    trials: Sequence[Trial],
    *,
    max_drop: float | None = None,
    min_entropy_ratio: float | None = None,
    max_entropy_ratio: float | None = None,
    across: Sequence[str] = ("task.",),
) -> Callable[[Trial], str | None]:
    """`skip(trial)`: why a trial is pruned (a finished run of its setting that ended more than
    `max_drop` points below its best, or kept less than `min_entropy_ratio` of its first sampled
    entropy, or more than `max_entropy_ratio` times it, named), or None to run it.

    Raises:
      ValueError: max_drop not positive, min_entropy_ratio outside (0, 1], max_entropy_ratio
        not above 1, or none given.
    """
    if max_drop is None and min_entropy_ratio is None and max_entropy_ratio is None:
        raise ValueError(
            "launch: pruning needs --prune_drop, --prune_entropy or --prune_entropy_max."
        )
    if max_drop is not None and not max_drop > 0:
        raise ValueError(
            f"launch: --prune_drop={max_drop} must be > 0 (points of held-out accuracy a run "
            "may end below its own best; the default rule allows 3)."
        )
    if min_entropy_ratio is not None and not 0 < min_entropy_ratio <= 1:
        raise ValueError(
            f"launch: --prune_entropy={min_entropy_ratio} must be in (0, 1] (the share of its "
            "first sampled entropy a run must keep; a new default keeps a third, 0.333)."
        )
    if max_entropy_ratio is not None and not max_entropy_ratio > 1:
        raise ValueError(
            f"launch: --prune_entropy_max={max_entropy_ratio} must be > 1 (the multiple of its "
            "first sampled entropy a run may end at; 2 catches a blow-up)."
        )

    def why(workdir: str, name: str) -> str | None:
        metrics = read_metrics(workdir)
        curve, side = choice_curve(metrics)  # the selection side, where the run has one
        if max_drop is not None and curve:
            drop = 100.0 * drop_from_best(curve)
            if exceeds(drop, max_drop):
                return (
                    f"{name} ended {drop:.1f} points below its best on the {side} side "
                    f"(> {max_drop:g})"
                )
        ratio = entropy_ratio(sampled_entropy(metrics))
        if min_entropy_ratio is not None and ratio is not None and ratio < min_entropy_ratio:
            return (
                f"{name} kept {ratio:.3f} of its first sampled entropy (< {min_entropy_ratio:.3g})"
            )
        if max_entropy_ratio is not None and ratio is not None and ratio > max_entropy_ratio:
            return (
                f"{name} ended at {ratio:.3f} times its first sampled entropy "
                f"(> {max_entropy_ratio:.3g})"
            )
        return None

    def skip(trial: Trial) -> str | None:
        setting = setting_of(trial.overrides, across)
        for other in trials:
            if setting_of(other.overrides, across) != setting or not is_finished(other):
                continue
            reason = why(other.workdir, other.name)
            if reason is not None:
                return reason
        return None

    return skip
