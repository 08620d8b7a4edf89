"""The report's figures per group, the differences between groups, and the held-out curves.

Per group (`summarize`): the runs (seeds), held-out greedy accuracy before and after training as
mean with a 95% interval (bootstrap over seeds and questions, `jaxrl_llm.evals.intervals`, from
each run's `eval_questions.jsonl`), the gain with its interval (paired by seed and question), the
best evaluation of the mean curve and its step, each seed's drop from its own best to its last
evaluation, the lowest ratio of a seed's last sampled-token entropy to its first (`train/entropy`;
a new default must keep at least a third), the hacks a seed's last evaluation shows and its first
did not (a constant answer, a copied input number: `jaxrl_llm.evals.hacks`, from the answers
`eval_questions.jsonl` keeps; "not kept" for older runs), the gain beyond chance (the gain in
Cohen's kappa between answers and references, which a constant answer does not move:
`jaxrl_llm.evals.agreement`; "not kept" where the records lack references), the mean wall time
(a lower bound, marked, where a seed's record counts only the process that finished it), and the
CPU the runs recorded.

    rows = [summarize(group) for group in collect_groups(["runs/seeds/main_job"])]
    diffs = compare(rows, "GRPO")                  # [(label, Interval)] against GRPO's group
    plot(rows, "docs/reports/main_job.png")

The rows are written as Markdown by `jaxrl_llm.report.tables`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxrl_llm.evals.agreement import kappa_intervals
from jaxrl_llm.evals.hacks import find_hacks
from jaxrl_llm.evals.intervals import difference_interval, seeds_questions_interval
from jaxrl_llm.report.loading import Group, Run, collect_groups
from jaxrl_llm.report.metrics import save_step_figure, step_axes
from jaxrl_llm.report.rules import differing_keys, drop_from_best, entropy_ratio
from jaxrl_llm.report.sides import check_one_scorer, cut_share
from jaxrl_llm.report.start import held_out_of
from jaxrl_llm.report.tables import host_cell

__all__ = ["choice_inputs", "compare", "family_confidence", "plot", "summarize"]


def _table(runs: Sequence[Run], step_of) -> tuple[np.ndarray, bool]:
    """[S, Q] correctness at each run's `step_of(run)` and whether it is per question (else
    [S, 1] accuracies: the interval then resamples seeds only)."""
    tables = [run.correct.get(step_of(run)) for run in runs]
    if all(t is not None for t in tables) and len({len(t) for t in tables}) == 1:
        return np.stack(tables).astype(np.float64), True
    accuracies = [run.curve.get(step_of(run), np.nan) for run in runs]
    return np.asarray(accuracies, np.float64)[:, None], False


def summarize(group: Group, *, num_resamples: int = 4000) -> dict[str, Any]:
    """The report's row for one group (intervals as `Interval`s, times in minutes)."""
    runs = sorted(group.runs, key=lambda r: r.seed)
    before, per_question = _table(runs, lambda r: 0)
    after, per_question_after = _table(runs, lambda r: r.final_step)
    per_question = per_question and per_question_after and before.shape == after.shape
    if not per_question:  # one accuracy per run on both sides: the interval resamples seeds
        before, after = before.mean(1, keepdims=True), after.mean(1, keepdims=True)
    gain = after - before
    steps = sorted(set.intersection(*(set(r.curve) for r in runs)))
    mean_curve = {s: float(np.mean([r.curve[s] for r in runs])) for s in steps}
    best_step = max(mean_curve, key=lambda s: (mean_curve[s], -s)) if mean_curve else None
    drops = [drop_from_best(r.curve) for r in runs if r.curve]
    # Each seed's last sampled entropy over its first (a new default must keep a third).
    entropy_ratios = [ratio for r in runs if (ratio := entropy_ratio(r.entropy)) is not None]
    hosts = sorted({host_cell(r.summary) for r in runs})
    # The hacks each seed's last evaluation shows against its first (None: answers not kept).
    kept = all(0 in r.answers and r.final_step in r.answers for r in runs)
    hacks = (
        {r.seed: find_hacks(r.answers[0], r.answers[r.final_step]) for r in runs} if kept else None
    )
    # Kappa, the gain beyond what the answer distributions earn by chance (evals.agreement).
    with_references = kept and all(r.answers[s].references for r in runs for s in (0, r.final_step))
    beyond_chance = (
        kappa_intervals(
            [r.answers[0] for r in runs],
            [r.answers[r.final_step] for r in runs],
            num_resamples=num_resamples,
        )
        if with_references
        else None
    )
    interval = lambda table: seeds_questions_interval(table, num_resamples=num_resamples)  # noqa: E731
    return {
        "cut_share": cut_share(runs),
        "label": group.label,
        "seeds": [r.seed for r in runs],
        "before": interval(before),
        "after": interval(after),
        "gain": interval(gain),
        "after_table": after if per_question else None,
        "seed_gains": [float(g) for g in gain.mean(1)],
        "per_question": per_question,
        "questions": before.shape[1] if per_question else None,
        "best": (mean_curve[best_step], best_step) if best_step is not None else None,
        "worst_drop": max(drops) if drops else None,
        "entropy_ratio": min(entropy_ratios) if len(entropy_ratios) == len(runs) else None,
        "entropy_ratio_max": max(entropy_ratios) if len(entropy_ratios) == len(runs) else None,
        "hacks": hacks,
        "beyond_chance": beyond_chance,
        "steps": sorted({r.final_step for r in runs}),
        "wall_min": float(np.mean([r.summary.get("wall_time_s", np.nan) for r in runs])) / 60,
        # a seed resumed from a checkpoint that did not keep its earlier processes' time
        "wall_partial": any("wall_time_since_step" in r.summary for r in runs),
        "hosts": hosts,
        "curves": {s: [r.curve[s] for r in runs] for s in steps},
        "runs": runs,
    }


def _held_out_of(row: Mapping[str, Any]) -> dict[str, Any]:
    return held_out_of(row["runs"][0].config)


def compare(
    rows: Sequence[Mapping[str, Any]],
    against: str,
    *,
    num_resamples: int = 4000,
    confidence: float = 0.95,
):
    """[(label, Interval)] of each other group's final held-out accuracy minus `against`'s, at
    `confidence` (`family_confidence` gives the level that holds for all of them together).

    Raises:
      ValueError: no group is labelled `against`; a group without per-question results; or
        groups evaluated on different held-out questions (the keys that differ named).
    """
    by_label = {row["label"]: row for row in rows}
    if against not in by_label:
        raise ValueError(f"--against {against!r}: no group has that label (the groups: "
                         f"{', '.join(by_label)}).")  # fmt: skip
    check_one_scorer(f"--against {against!r}", [run for row in rows for run in row["runs"]])
    base = by_label[against]
    out = []
    for row in rows:
        if row is base:
            continue
        if row["after_table"] is None or base["after_table"] is None:
            raise ValueError(
                f"--against {against!r}: group {row['label']!r} or {against!r} has no "
                "per-question results (eval_questions.jsonl) to pair questions with."
            )
        keys = differing_keys([_held_out_of(base), _held_out_of(row)])
        if keys or row["after_table"].shape[1] != base["after_table"].shape[1]:
            raise ValueError(
                f"--against {against!r}: group {row['label']!r} was evaluated on other held-out "
                f"questions ({', '.join(keys) or 'another number of questions'} differ); "
                "compare groups of one task and eval set."
            )
        diff = difference_interval(
            row["after_table"],
            base["after_table"],
            confidence=confidence,
            num_resamples=num_resamples,
        )
        out.append((row["label"], diff))
    return out


def family_confidence(num_comparisons: int, confidence: float = 0.95) -> float:
    """The level at which each of `num_comparisons` intervals must be taken for all of them to
    hold together at `confidence` (Bonferroni: 1 - (1 - confidence) / k; 0.99 for 5 at 0.95)."""
    return 1.0 - (1.0 - confidence) / max(num_comparisons, 1)


def plot(rows: Sequence[Mapping[str, Any]], path: str, *, num_resamples: int = 1000) -> str:
    """Writes a PNG of each group's mean held-out accuracy against step with its 95% band."""
    fig, ax = step_axes()
    for row in rows:
        steps = sorted(row["curves"])
        if not steps:
            continue
        runs = row["runs"]
        bands = []
        for step in steps:
            table, _ = _table(runs, lambda r, s=step: s)
            bands.append(seeds_questions_interval(table, num_resamples=num_resamples))
        means = [100 * b.mean for b in bands]
        line = ax.plot(steps, means, marker="o", label=f"{row['label']} ({len(runs)} seeds)")[0]
        ax.fill_between(
            steps, [100 * b.low for b in bands], [100 * b.high for b in bands],
            color=line.get_color(), alpha=0.2,
        )  # fmt: skip
    return save_step_figure(
        fig, ax, path, ylabel="held-out greedy accuracy (%)",
        title="held-out accuracy: mean over seeds, 95% band (seeds x questions)",
    )  # fmt: skip


def choice_inputs(
    paths: Sequence[str], rows: Sequence[Mapping[str, Any]], num_resamples: int
) -> tuple[list[Mapping[str, Any]], str]:
    """(summarized groups, side) that `--choose_across` chooses by: the runs read on the
    selection side when every one of them has it, else `rows` on their own side (runs made
    before the selection side existed; the choice then says so). All must share one scorer."""
    check_one_scorer("--choose_across", [run for row in rows for run in row["runs"]])
    groups = collect_groups(paths, log=lambda _: None, side="selection")
    if all(run.curve for group in groups for run in group.runs):
        return [summarize(g, num_resamples=num_resamples) for g in groups], "selection"
    return list(rows), rows[0]["runs"][0].side
