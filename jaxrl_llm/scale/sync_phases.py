"""The weight sync's phases in a plan: memory per chip group and time, from compiled reports.

`sync_phases` takes the compiled reports of a `weight_sync.SyncPrograms` (the cast, the moves,
the transport sends and receives, each run once per array) and gives one phase per chip group,
each with the memory of its own chips: "reshard" on the learner's chips (colocated: every chip,
every program) and, for a split placement, "reshard_receive" on the generator's:

  peak    = the roles resident there
          + what the sync keeps there to its end: the cast copy (the cast programs' outputs
            times their runs) on the learner's chips, the decode copy (the moved arrays in the
            decode layout) on the decode mesh's chips
          + the largest array in flight (a transport block sent or received) with its
            program's temporaries and code
  seconds = sum over programs of runs x max(HBM bytes: arguments + outputs over bandwidth,
            collectives of the compiled HLO over ICI) + the bytes `jax.device_put` copies,
            over one torus dimension's ICI (where they land)
"""

from __future__ import annotations

import dataclasses

from jaxrl_llm.scale import costs
from jaxrl_llm.scale.analysis import ProgramReport
from jaxrl_llm.scale.chips import Chip
from jaxrl_llm.scale.placements import PhaseResult
from jaxrl_llm.scale.weight_sync import SyncPrograms


def merged_report(phase: str, reports: list[ProgramReport]) -> ProgramReport:
    """One report for programs run one after another, each `runs` times: arguments, outputs,
    FLOPs, bytes and collectives added up over the runs; temporaries and code the largest one
    program's (one runs at a time)."""
    total = lambda field: sum(getattr(r, field) * r.runs for r in reports)  # noqa: E731
    return ProgramReport(
        phase=phase,
        mesh=reports[0].mesh,
        runs=1,
        argument_bytes=total("argument_bytes"),
        output_bytes=total("output_bytes"),
        alias_bytes=total("alias_bytes"),
        temp_bytes=max(r.temp_bytes for r in reports),
        code_bytes=max(r.code_bytes for r in reports),
        compiler_flops=total("compiler_flops"),
        compiler_bytes=total("compiler_bytes"),
        collectives=tuple(
            dataclasses.replace(op, runs=None if op.runs is None else op.runs * r.runs)
            for r in reports
            for op in r.collectives
        ),
        compile_seconds=sum(r.compile_seconds for r in reports),
    )


def _in_flight(report: ProgramReport) -> float:
    """Bytes per chip a program needs beyond what the sync keeps: its temporaries and code, and
    the transport block it writes (a send) or reads (a receive)."""
    block = {"reshard_send": report.output_bytes, "reshard_receive": report.argument_bytes}
    return report.temp_bytes + report.code_bytes + block.get(report.phase, 0.0)


def _timed(reports: list[ProgramReport], chip: Chip, copy_bytes: float) -> costs.Roofline:
    """The roofline of `reports` run one after another (each `runs` times), then `copy_bytes`
    over one torus dimension's ICI (see the module docstring)."""
    memory = comm = seconds = 0.0
    for r in reports:
        cost = costs.PhaseCost(0.0, r.argument_bytes + r.output_bytes, r.comm_seconds(chip))
        line = costs.roofline(cost, chip)
        memory += line.memory_s * r.runs
        comm += line.comm_s * r.runs
        seconds += line.seconds * r.runs
    copy = copy_bytes / (chip.collective_bandwidth(1) or chip.hbm_bandwidth)
    comm, seconds = comm + copy, seconds + copy
    return costs.Roofline(seconds, 0.0, memory, comm, 0.0, "comm" if comm >= memory else "memory")


def _phase(name, reports, chip, *, kept: float, copy_bytes: float = 0.0) -> PhaseResult:
    line = _timed(reports, chip, copy_bytes)
    report = merged_report(name, reports) if reports else None
    if report is not None and copy_bytes:
        report = dataclasses.replace(report, transfer_bytes=copy_bytes)
    peak = kept + max((_in_flight(r) for r in reports), default=0.0)
    return PhaseResult(name, report, peak, line.seconds, line)


def sync_phases(
    sync: SyncPrograms,
    reports: list[ProgramReport],
    chip: Chip,
    *,
    split: bool,
    learner_resident: float,
) -> dict[str, PhaseResult]:
    """The plan's weight-sync phases (see the module docstring).

    Args:
      sync: the sync's programs.
      reports: their compiled reports, in the order of `sync.programs`.
      chip: the chip the roofline prices.
      split: the decode mesh on other chips than the learner's.
      learner_resident: bytes per learner chip the other roles keep there (their states).

    Returns:
      {"reshard": ...} (colocated), or {"reshard": ..., "reshard_receive": ...} (split).
    """
    cast_copy = sum(r.output_bytes * r.runs for r in reports if r.phase == "reshard_cast")
    decode_copy = sync.held_bytes + sync.decode_bytes
    if not split:
        kept = learner_resident + cast_copy + decode_copy
        return {"reshard": _phase("reshard", reports, chip, kept=kept, copy_bytes=sync.copy_bytes)}
    receive = [r for r in reports if r.phase == "reshard_receive"]
    learner = [r for r in reports if r.phase != "reshard_receive"]
    return {
        "reshard": _phase("reshard", learner, chip, kept=learner_resident + cast_copy),
        "reshard_receive": _phase(
            "reshard_receive", receive, chip, kept=decode_copy, copy_bytes=sync.copy_bytes
        ),
    }
