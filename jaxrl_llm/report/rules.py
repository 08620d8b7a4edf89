"""The pieces of the rule a new default must meet (each seed ends within 3 points of its own
best held-out evaluation and keeps a third of its first sampled entropy) that the report (`jaxrl_llm.report`), its choice of a default
(`jaxrl_llm.report.choice`) and the sweep pruner (`jaxrl_llm.launch.prune`) share: a run's
held-out curve and sampled entropy from its metrics rows, its drop from its best evaluation, the
share of its entropy it keeps, and the keys that join runs into groups and settings.

    curve = held_out_curve(read_metrics(workdir))        # {step: held-out accuracy}
    exceeds(drop_from_best(curve), 0.03)                  # out of the rule?
    entropy_ratio(sampled_entropy(read_metrics(workdir)))  # last / first
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jaxrl_llm.evals.suite import SELECTION_SET

__all__ = [
    "ADDED_KEYS",
    "IGNORED_KEYS",
    "choice_curve",
    "config_key",
    "differing_keys",
    "drop_from_best",
    "entropy_ratio",
    "exceeds",
    "held_out_curve",
    "sampled_entropy",
    "with_added_keys",
]

# What may differ inside a group: the seed, and how often and how many checkpoints a run writes
# (a resumed run continues exactly, so neither changes what it learns).
IGNORED_KEYS = ("seed", "train.checkpoint_every", "train.keep_checkpoints")
# Config keys added after runs were recorded: {key: (a key the older configs of that section
# have, the value the older code ran with)}. An older run of the same setting would otherwise
# count as another setting (a missing key differs).
ADDED_KEYS = {
    # the entropy controller's floor, fixed at 1e-6 before it became a field (2026-11-27)
    "stabilise.entropy_min_coef": ("stabilise.entropy_max_coef", 1e-6),
    # the flag that allows resuming under changed training fields (2026-11-28); older runs were
    # resumed, where at all, by their own sweep command
    "train.resume_with_changes": ("train.num_steps", False),
    # Clip-Cov (2026-11-28), off before it existed; its window at the defaults
    "stabilise.clip_cov_fraction": ("stabilise.entropy_max_coef", 0.0),
    "stabilise.clip_cov_low": ("stabilise.entropy_max_coef", 1.0),
    "stabilise.clip_cov_high": ("stabilise.entropy_max_coef", 5.0),
    # the entropy target as a share of the first step's entropy (2026-11-29), off before
    "stabilise.entropy_target_ratio": ("stabilise.entropy_max_coef", 0.0),
    # Clip-Cov's share adapted toward an entropy target (2026-11-29), fixed before
    "stabilise.clip_cov_target_ratio": ("stabilise.entropy_max_coef", 0.0),
    "stabilise.clip_cov_rate": ("stabilise.entropy_max_coef", 1.0),
    "stabilise.clip_cov_min_fraction": ("stabilise.entropy_max_coef", 0.002),
    "stabilise.clip_cov_max_fraction": ("stabilise.entropy_max_coef", 0.3),
    # the reward-model check and per-batch whitening of reward models (2026-12-06), off before
    "rewards.model_check_auc": ("rewards.model", 0.0),
    "rewards.model_check_steps": ("rewards.model", 3),
    "rewards.model_check_action": ("rewards.model", "flag"),
    "rewards.model_whiten": ("rewards.model", False),
}


def with_added_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """A flat config with each `ADDED_KEYS` key it lacks set to the value its code ran with,
    where the config has that key's section (its sibling key)."""
    filled = dict(config)
    for key, (sibling, value) in ADDED_KEYS.items():
        if key not in filled and sibling in filled:
            filled[key] = value
    return filled


def config_key(config: Mapping[str, Any], keep) -> str:
    """A hashable key of the entries of `config` whose key `keep(key)` accepts (values by repr,
    so unhashable values compare too)."""
    return repr(sorted((k, repr(v)) for k, v in config.items() if keep(k)))


def sampled_entropy(metrics: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """{step: mean entropy of the step's sampled tokens} of a run's metrics (`train/entropy`).

    A step whose dynamic sampling kept no group (`stabilise/kept_group_fraction` 0) trains on no
    token: the runner logs no entropy for it now, and records written before that logged 0.0,
    which measures nothing, so it is left out."""
    return {
        int(r["step"]): r["train/entropy"]
        for r in metrics
        if "train/entropy" in r and r.get("stabilise/kept_group_fraction", 1.0) > 0
    }


def held_out_curve(metrics: Sequence[Mapping[str, Any]], side: str = "test") -> dict[int, float]:
    """{step: held-out accuracy of the run's task} of a run's metrics rows: on the test side
    (`eval/accuracy`, what tables report) or the selection side (`eval/selection/accuracy`,
    what settings are chosen and sweeps pruned by; `SELECTION_SET`)."""
    key = "eval/accuracy" if side == "test" else f"eval/{SELECTION_SET}/accuracy"
    return {int(r["step"]): r[key] for r in metrics if key in r}


def choice_curve(metrics: Sequence[Mapping[str, Any]]) -> tuple[dict[int, float], str]:
    """(curve, side) a setting is chosen or pruned by: the selection side's held-out curve, or
    for a run evaluated before that side existed its one held-out curve ("test": chosen on the
    questions it reports, a selection bias the caller says)."""
    selection = held_out_curve(metrics, "selection")
    return (selection, "selection") if selection else (held_out_curve(metrics), "test")


def drop_from_best(curve: Mapping[int, float]) -> float:
    """How far a run's last evaluation of {step: held-out accuracy} ends below its best (a new
    default's runs may drop 0.03); 0.0 for a curve that ends at its best."""
    return max(curve.values()) - curve[max(curve)]


def exceeds(value: float, limit: float) -> bool:
    """Whether `value` is above `limit` by more than float rounding: a drop of exactly the
    allowed 3 points (0.355 - 0.325 = 0.030000000000000027) stays within it."""
    return value > limit + 1e-9 * max(1.0, abs(limit))


def entropy_ratio(entropy: Mapping[int, float]) -> float | None:
    """A run's last sampled-token entropy over its first, of {step: `train/entropy`} (a new
    default must keep at least a third); None when not logged or the first is 0."""
    if not entropy or not entropy[min(entropy)] > 0:
        return None
    return entropy[max(entropy)] / entropy[min(entropy)]


def differing_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The dotted keys whose values differ between `configs` (a key missing counts), sorted."""
    keys = set().union(*configs) - set(IGNORED_KEYS)
    return sorted(k for k in keys if len({repr(c.get(k, "<missing>")) for c in configs}) > 1)
