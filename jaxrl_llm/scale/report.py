"""Markdown tables of plans: the ranking, one plan's phases, and a program's collectives."""

from __future__ import annotations

from collections.abc import Sequence

from jaxrl_llm.scale.analysis import ProgramReport
from jaxrl_llm.scale.chips import Chip
from jaxrl_llm.scale.placements import SYNC_PHASES, Plan

GIB = 2**30


def _gib(x: float) -> str:
    return f"{x / GIB:.2f}"


def _seconds(x: float) -> str:
    if x != x or x == float("inf"):
        return "-"
    return f"{x:.3g}"


def plans_table(plans: Sequence[Plan], chip: Chip, top: int = 5) -> str:
    """The `top` fitting plans, then up to `top` rejected ones with the figure that rejects
    them. Memory is the largest per-chip peak over the plan's phases (GiB, of the chip's HBM)."""
    lines = [
        f"| # | placement | peak GiB / chip (of {chip.hbm_bytes / GIB:.0f}) | rollout s | "
        "train s | other s | reshard s | step s | decode ms/token | bound (rollout, train) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    fitting = [p for p in plans if p.fits][:top]
    for i, plan in enumerate(fitting, 1):
        ph = plan.phases
        peak = max(p.peak_bytes for p in ph.values())
        other = sum(
            p.seconds
            for k, p in ph.items()
            if k not in ("rollout", "actor_train") and k not in SYNC_PHASES
        )
        sync = sum(p.seconds for k, p in ph.items() if k in SYNC_PHASES)
        bounds = f"{ph['rollout'].roofline.bound}, {ph['actor_train'].roofline.bound}"
        lines.append(
            f"| {i} | {plan.candidate.label()} | {_gib(peak)} | {_seconds(ph['rollout'].seconds)}"
            f" | {_seconds(ph['actor_train'].seconds)} | {_seconds(other)} | "
            f"{_seconds(sync)} | **{_seconds(plan.step_seconds)}** | "
            f"{plan.decode_ms_per_token:.3g} | {bounds} |"
        )
    rejected = [p for p in plans if not p.fits][:top]
    if rejected:
        lines += ["", "Rejected:", ""]
        lines += [f"- {p.candidate.label()}: {p.reason}" for p in rejected]
        more = sum(not p.fits for p in plans) - len(rejected)
        if more > 0:
            lines.append(f"- ... and {more} more")
    return "\n".join(lines)


def phases_table(plan: Plan, chip: Chip) -> str:
    """Per phase: the compiler's memory (arguments, temporaries, code, the peak with the roles
    resident beside it, per chip of the phase's own group), the roofline terms of one run (of
    every program for the weight sync) and the predicted seconds per step."""
    lines = [
        "| phase | mesh | args GiB | temp GiB | code MiB | peak + resident GiB | runs | "
        "compute s | memory s | comm s | bound | s / step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, phase in plan.phases.items():
        r, line = phase.report, phase.roofline
        if r is None:
            compiled = "- | - | - | -"
        else:
            mesh = "x".join(str(v) for v in r.mesh.values())
            compiled = (
                f"{mesh} | {_gib(r.argument_bytes)} | {_gib(r.temp_bytes)} | "
                f"{r.code_bytes / 2**20:.1f}"
            )
        lines.append(
            f"| {name} | {compiled} | {_gib(phase.peak_bytes)} | {r.runs if r else 1} | "
            f"{_seconds(line.compute_s)} | {_seconds(line.memory_s)} | {_seconds(line.comm_s)} | "
            f"{line.bound} | {_seconds(phase.seconds)} |"
        )
    return "\n".join(lines)


# What plan.md's figures are: the compiler's (read from the compiled programs) or counted here.
FIGURES_NOTE = (
    "Which figures are the compiler's and which are counted: **the compiler's** are the memory "
    "columns (args, temp, code and the compiled peak: `memory_analysis()` of each program for "
    'the slice, per chip; "peak + resident" adds the other roles\' compiled state, and the '
    "weight sync's its kept copies) and the collectives behind `comm s` (the ops, bytes, "
    "groups and loop trip counts of the optimized HLO, priced at the chip's published ICI "
    "bandwidth). **Counted** (`jaxrl_llm.scale.costs`, from the model's shapes, not the "
    "compiler's `cost_analysis()`, which counts a loop body once) are the FLOPs behind "
    "`compute s` and the HBM bytes behind `memory s`, except the weight sync's, which are its "
    "programs' compiled argument and output bytes. Every time (`s`, `step s`, ms/token) is a "
    "roofline of those terms at the chip's published peaks: a floor, not a measurement."
)


def figures_note() -> str:
    """The paragraph `plan.md` carries under its tables: which figures come from the compiler
    (memory, collectives) and which are counted (FLOPs, HBM bytes, every time)."""
    return FIGURES_NOTE


def collectives_table(report: ProgramReport) -> str:
    """Per collective kind: ops, executions per call, GiB received per device per call."""
    lines = ["| collective | ops | executions | GiB received / device | in unbounded loops |",
             "|---|---|---|---|---|"]  # fmt: skip
    for kind, t in report.collective_totals().items():
        lines.append(
            f"| {kind} | {t.count} | {t.executions} | {t.bytes_received / GIB:.3f} | "
            f"{t.in_unbounded_loops} |"
        )
    return "\n".join(lines)
