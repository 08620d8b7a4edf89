"""Choosing a sweep's default by the rule a new default must meet (`python -m jaxrl_llm.report --choose_across`).

Groups summarized by `jaxrl_llm.report.summary.summarize` whose configs agree but for the seed
and the keys under a prefix (`task.`) are one setting; a setting qualifies when it ran on every
task with at least 3 seeds, each ending within `max_drop` of its own best held-out evaluation (and,
with `min_entropy_ratio`, keeping that share of its first sampled entropy); the default is the
qualifying setting of the highest mean gain over tasks. The pruner of a running sweep
(`jaxrl_llm.launch.prune`) applies the same rule to the trials not yet started.

    rows = [report.summarize(group) for group in report.collect_groups(["runs/seeds/stabilisers"])]
    settings, chosen = choose(rows, "task.", max_drop=0.03, min_entropy_ratio=1 / 3)
    print(report.choice_markdown(settings, chosen, 0.03, 1 / 3))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_llm.report.rules import IGNORED_KEYS, config_key, differing_keys, exceeds

__all__ = ["Setting", "choose", "common_values"]


class Setting(NamedTuple):
    """One setting of a sweep over tasks (`choose`): its rows, one per task."""

    label: str  # its values of the keys where it differs from the majority (`common_values`)
    values: dict[str, Any]  # its values of the keys the settings differ in
    rows: list[tuple[str, dict[str, Any]]]  # (the task's keys, its summarized group)
    mean_gain: float
    reasons: list[str]  # why it does not qualify; empty when it does


def common_values(configs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """{key: the value more than half of `configs` share}, for the keys that have one: what a
    setting's label leaves unsaid (`choose`), so that a sweep of seven settings over eight keys
    labels each by the two or three it changes."""
    counts: dict[str, Counter] = {}
    for config in configs:
        for key, value in config.items():
            counts.setdefault(key, Counter())[repr(value)] += 1
    common = {}
    for key, count in counts.items():
        value_repr, n = count.most_common(1)[0]
        if 2 * n > len(configs):
            common[key] = next(c[key] for c in configs if repr(c.get(key)) == value_repr)
    return common


def choose(
    rows: Sequence[Mapping[str, Any]],
    across: str = "task.",
    *,
    max_drop: float = 0.03,
    min_seeds: int = 3,
    min_entropy_ratio: float | None = None,
    max_entropy_ratio: float | None = None,
) -> tuple[list[Setting], Setting | None]:
    """The rule a new default must meet, over summarized groups (`summarize`).

    Groups whose configs agree but for the seed and the keys under `across` are one setting.
    A setting qualifies when it has a group for every task (every value of the `across` keys
    among `rows`), each of at least `min_seeds` seeds whose worst drop (best held-out
    evaluation minus the last, `summarize`'s `worst_drop`) is at most `max_drop`; with
    `min_entropy_ratio`, also each seed's last sampled entropy at least that share of its first
    (a new default must keep a third: a setting that loses more cannot become it);
    with `max_entropy_ratio`, each seed's last at most that multiple of its first (a blow-up).

    Returns:
      (settings, sorted by mean gain over their tasks, highest first; the chosen setting: the
      first that qualifies, or None).
    """
    settings: dict[str, list[Mapping[str, Any]]] = {}
    tasks: set[str] = set()
    for row in rows:
        config = row["runs"][0].config
        tasks.add(config_key(config, lambda k: k.startswith(across)))
        key = config_key(config, lambda k: k not in IGNORED_KEYS and not k.startswith(across))
        settings.setdefault(key, []).append(row)
    configs = [
        {k: v for k, v in group[0]["runs"][0].config.items() if not k.startswith(across)}
        for group in settings.values()
    ]
    shown = differing_keys(configs) if len(configs) > 1 else []
    task_configs = [
        {k: v for k, v in r["runs"][0].config.items() if k.startswith(across)} for r in rows
    ]
    # The keys that tell the tasks apart; with one task so far, its name keys (`task.name`).
    task_keys = differing_keys(task_configs) or sorted(
        k for k in task_configs[0] if k.endswith(".name")
    )
    values = [{k: config[k] for k in shown if k in config} for config in configs]
    common = common_values(values)
    out = []
    for group, setting_values in zip(settings.values(), values, strict=True):
        # Keys an older code version did not write are counted, not listed.
        absent = [k for k in shown if k not in setting_values]
        label = ", ".join(
            f"{k}={v}"
            for k, v in setting_values.items()
            if k not in common or repr(common[k]) != repr(v)
        )
        if absent:
            label += f"{' ' if label else ''}({len(absent)} of the keys absent from its config)"
        label = label or ("the common values" if common else "all runs")
        reasons = []
        if len(group) < len(tasks):
            reasons.append(f"ran on {len(group)} of the {len(tasks)} tasks")
        cells = []
        for row in group:
            task_config = row["runs"][0].config
            task = ", ".join(f"{k}={task_config.get(k)}" for k in task_keys) or row["label"]
            cells.append((task, row))
            if len(row["seeds"]) < min_seeds:
                reasons.append(f"{task}: {len(row['seeds'])} seeds (< {min_seeds})")
            if row["worst_drop"] is None:
                reasons.append(f"{task}: no evaluation")
            elif exceeds(row["worst_drop"], max_drop):
                reasons.append(
                    f"{task}: a seed ends {100 * row['worst_drop']:.1f} points below its best "
                    f"(> {100 * max_drop:g})"
                )
            if min_entropy_ratio is not None:
                ratio = row["entropy_ratio"]
                if ratio is None:
                    reasons.append(f"{task}: sampled entropy not logged by every seed")
                elif ratio < min_entropy_ratio:
                    reasons.append(
                        f"{task}: a seed keeps {ratio:.3f} of its first sampled entropy "
                        f"(< {min_entropy_ratio:.3g})"
                    )
            if max_entropy_ratio is not None and row.get("entropy_ratio_max") is not None:
                if row["entropy_ratio_max"] > max_entropy_ratio:
                    reasons.append(
                        f"{task}: a seed ends at {row['entropy_ratio_max']:.3f} times its first "
                        f"sampled entropy (> {max_entropy_ratio:g})"
                    )
        mean_gain = float(np.mean([row["gain"].mean for row in group]))
        out.append(Setting(label, setting_values, cells, mean_gain, reasons))
    out.sort(key=lambda s: -s.mean_gain)
    return out, next((s for s in out if not s.reasons), None)
