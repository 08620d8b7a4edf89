"""The report's Markdown: its cells (a percentage with its interval, a signed difference, the
hacks, the CPU), one row per group in `COLUMNS` order, the header that says what the columns
mean, and the `--against` and `--choose_across` tables (`jaxrl_llm.report.summary` summarizes
the runs; this module only writes what it summarized).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from jaxrl_llm.evals.intervals import Interval
from jaxrl_llm.report.choice import Setting, common_values
from jaxrl_llm.report.sides import SIDE_NOTES, sides_and_scorers

__all__ = [
    "COLUMNS",
    "choice_markdown",
    "comparison_markdown",
    "difference_cell",
    "hacks_cell",
    "host_cell",
    "markdown",
    "percent_cell",
    "row_cells",
]


def comparison_markdown(against: str, diffs, family_diffs=None) -> str:
    """The `--against` table; `family_diffs`, the same at `family_confidence`, adds a column."""
    family = family_diffs is not None and len(diffs) > 1
    level = family_diffs[0][1].confidence if family else None
    lines = [
        "",
        f"Against {against}: final held-out accuracy minus {against}'s, in points, with a 95% "
        "interval (questions paired, each group's seeds resampled on their own); a difference "
        "whose interval includes 0 is not a win.",
    ]
    if family:
        lines.append(
            f"With {len(diffs)} groups compared against one, about one in 20 of their 95% "
            "intervals may exclude 0 by chance; the last column is each interval at "
            f"{100 * level:.4g}% (Bonferroni), which hold all together at 95%: a difference "
            "that excludes 0 only in the first column is a lead, not yet a win."
        )
    header = f"| group | minus {against} (points) |"
    lines += ["", header + (f" {100 * level:.4g}% (Bonferroni) |" if family else "")]
    lines.append("| --- | --- |" + (" --- |" if family else ""))
    for i, (label, diff) in enumerate(diffs):
        cells = [label, difference_cell(diff)]
        cells += [difference_cell(family_diffs[i][1])] if family else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def choice_markdown(
    settings: Sequence[Setting],
    chosen: Setting | None,
    max_drop: float,
    min_entropy_ratio: float | None = None,
    max_entropy_ratio: float | None = None,
    side: str = "selection",
) -> str:
    """The `--choose_across` table: each setting's gain per task, its worst drop, and why it
    does or does not qualify, on the `side` of the split the choice read."""
    entropy_rule = (
        ""
        if min_entropy_ratio is None
        else f" and keeps at least {min_entropy_ratio:.2f} of its first sampled entropy"
    )
    if max_entropy_ratio is not None:
        entropy_rule += f" and ends at most at {max_entropy_ratio:g} times it"
    lines = [
        "",
        f"Settings (groups joined across tasks), by mean gain over tasks, read on the "
        f"{SIDE_NOTES[side]}. A setting qualifies "
        f"when on every task each of >= 3 seeds ends within {100 * max_drop:g} points of its "
        f"own best evaluation{entropy_rule}; the default is the qualifying setting of the "
        "highest mean gain.",
        "",
        "| setting | mean gain (points) | per task: gain [95%], worst drop, entropy last/first "
        "| qualifies |",
        "| --- | --- | --- | --- |",
    ]
    for setting in settings:
        tasks = "; ".join(
            f"{task}: {percent_cell(row['gain'], signed=True)}, "
            + ("-" if row["worst_drop"] is None else f"{100 * row['worst_drop']:.1f}")
            + ("" if row["entropy_ratio"] is None else f", {row['entropy_ratio']:.2f}")
            for task, row in setting.rows
        )
        verdict = "yes" if not setting.reasons else "no: " + "; ".join(setting.reasons)
        lines.append(f"| {setting.label} | {100 * setting.mean_gain:+.1f} | {tasks} | {verdict} |")
    common = common_values([setting.values for setting in settings])
    if common:
        shared = ", ".join(f"{k}={v}" for k, v in sorted(common.items()))
        lines += ["", f"Unless its label names another value, a setting has {shared}."]
    lines += ["", f"Chosen: {chosen.label}." if chosen else "Chosen: none qualifies."]
    return "\n".join(lines) + "\n"


def host_cell(summary: Mapping[str, Any]) -> str:
    """The machine a run's summary.json records: "CPU (ISA, N cores)", with its accelerator
    before it where it had one; "CPU not recorded" for older runs."""
    host = summary.get("host")
    if not host:
        return "CPU not recorded"
    cpu = f"{host['cpu']} ({host['isa']}, {host['cores']} cores)"
    return f"{host['accelerator']} on {cpu}" if host.get("accelerator") else cpu


def percent_cell(interval: Interval, signed: bool = False) -> str:
    """A fraction's interval as a cell in percent: `12.5 [4.0, 21.0]`, or `+12.5 [+4.0, +21.0]`."""
    sign = "+" if signed else ""
    return (
        f"{100 * interval.mean:{sign}.1f} [{100 * interval.low:{sign}.1f}, "
        f"{100 * interval.high:{sign}.1f}]"
    )


def difference_cell(interval: Interval) -> str:
    """A gain or a difference, signed, marked when its interval includes 0 (not a gain)."""
    return percent_cell(interval, signed=True) + (
        "" if interval.excludes_zero() else " (includes 0)"
    )


COLUMNS = (
    "group", "seeds", "before %", "after %", "gain (points)", "per-seed gains",
    "best % (step)", "worst drop", "entropy last/first", "hacks (last eval)",
    "gain beyond chance (kappa, points)", "right answers cut (last eval)", "steps",
    "wall (min)", "CPU",
)  # fmt: skip


def row_cells(row: Mapping[str, Any]) -> list[str]:
    """A summarized group's cells, in `COLUMNS` order."""
    best = row["best"]
    return [
        row["label"],
        ",".join(map(str, row["seeds"]))
        + (" (a sketch: < 3 seeds)" if len(row["seeds"]) < 3 else ""),
        percent_cell(row["before"]),
        percent_cell(row["after"]),
        difference_cell(row["gain"]),
        " / ".join(f"{100 * g:+.1f}" for g in row["seed_gains"]),
        "" if best is None else f"{100 * best[0]:.1f} ({best[1]})",
        "" if row["worst_drop"] is None else f"{100 * row['worst_drop']:.1f}",
        "" if row["entropy_ratio"] is None else f"{row['entropy_ratio']:.2f}",
        hacks_cell(row["hacks"]),
        "not kept" if row["beyond_chance"] is None else difference_cell(row["beyond_chance"].gain),
        "not kept" if row["cut_share"] is None else f"{100 * row['cut_share']:.1f}%",
        ",".join(map(str, row["steps"])),
        ("≥ " if row["wall_partial"] else "") + f"{row['wall_min']:.1f}",
        "; ".join(row["hosts"]),
    ]


def hacks_cell(hacks: Mapping[int, Sequence[str]] | None) -> str:
    """ "none", each seed's hacks (`jaxrl_llm.evals.hacks.find_hacks`), or "not kept" for runs
    whose evaluations kept no answers."""
    if hacks is None:
        return "not kept"
    found = [f"seed {seed}: {'; '.join(h)}" for seed, h in sorted(hacks.items()) if h]
    return " / ".join(found) or "none"


def markdown(rows: Sequence[Mapping[str, Any]], *, command: str = "") -> str:
    """The report as Markdown: what it shows, then one table row per group."""
    notes = [
        f"Generated {datetime.date.today()} by `{command or 'python -m jaxrl_llm.report'}`.",
        sides_and_scorers(rows),
        "Held-out greedy accuracy: mean over seeds with its 95% interval, bootstrapped over "
        "seeds and questions (gain: paired by seed and question); a gain whose interval "
        "includes 0 is marked. Worst drop: the largest fall of one seed from its best held-out "
        "evaluation to its last, in points. Entropy last/first: the lowest over seeds of the "
        "mean sampled-token entropy at the last step over that at the first. Hacks: a constant "
        "answer, a copied input number or negative answers avoided that a seed's last "
        "evaluation shows and its first did not (`jaxrl_llm.evals.hacks`). Gain beyond chance: "
        "the gain in Cohen's kappa between the greedy answers and the references, "
        "(accuracy - p_e) / (1 - p_e) with p_e the "
        "accuracy the two answer distributions give by chance (0 for a constant answer, close to "
        "the accuracy on a task of many answers; `jaxrl_llm.evals.agreement`), bootstrapped the "
        "same way. Right answers cut: the share of the last evaluation's right answers whose "
        "completion was cut at the token limit (0 under a scorer for which a cut completion "
        "states no answer). A group of fewer than 3 seeds is a sketch, not a result.",
    ]
    if any(not r["per_question"] for r in rows):
        notes.append("Rows without per-question results resample seeds only.")
    if any(r["wall_partial"] for r in rows):
        notes.append(
            "Wall ≥: a seed of the group resumed from a checkpoint that did not keep the "
            "earlier processes' time, so its record counts only the process that finished it."
        )
    lines = notes + ["", "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"
