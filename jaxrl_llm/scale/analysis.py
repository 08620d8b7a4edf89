"""Compiling a `Program` and reading what the compiler says: memory, FLOPs, collectives.

    report = analyze(program, cache=CompileCache("~/.cache/jaxrl_llm/aot"))
    report.peak_bytes, report.collectives, report.comm_seconds(chip)

`memory_analysis()` gives per-device argument, output, aliased (donated), temporary and code
bytes; the peak a device holds while the program runs is arguments + outputs - aliased +
temporaries + code. `cost_analysis()`'s FLOPs and bytes are recorded as the compiler states
them (a while loop's body counted once; see `jaxrl_llm.scale.costs`). Collectives come from the
optimized HLO (`jaxrl_llm.scale.hlo`).

Compiling an 8B train step for a TPU pod takes minutes on two CPU cores, so reports are cached
on disk by program key (phase, shapes, options, mesh, device ids and kinds, jax and libtpu
versions, and a hash of this library's source): a search and its rerun compile each program
once.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import time
from collections.abc import Sequence
from typing import Any

import jax

from jaxrl_llm.scale import hlo
from jaxrl_llm.scale.chips import Chip
from jaxrl_llm.scale.programs import Program


@dataclasses.dataclass(frozen=True)
class CollectiveRecord:
    """A collective as stored in a report (see `hlo.Collective`)."""

    kind: str
    result_bytes: int
    group_size: int
    num_groups: int
    runs: int | None
    dims_spanned: int
    computation: str
    op_name: str
    per_iteration: int | None = None
    loop: str = ""

    @property
    def bytes_received(self) -> float:
        """Bytes each device receives per execution (ring model)."""
        return hlo.Collective(
            self.kind, self.result_bytes, self.group_size, self.num_groups, (), self.runs,
            self.computation, self.op_name, self.dims_spanned,
        ).bytes_received  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ProgramReport:
    """What the compiler says about one program, per device.

    Attributes:
      phase: the program's phase.
      mesh: mesh axis sizes, e.g. {"data": 16, "model": 4}.
      runs: executions per RL step.
      argument_bytes, output_bytes, alias_bytes, temp_bytes, code_bytes: `memory_analysis()`.
      compiler_flops, compiler_bytes: `cost_analysis()` (loop bodies counted once).
      collectives: every collective of the optimized HLO.
      transfer_bytes: for the weight sync's phases, the bytes `jax.device_put` copies to each
        chip of the decode mesh (`jaxrl_llm.scale.sync_phases`).
      compile_seconds: how long the compile took here (0 when read from the cache).
      out_of_memory: the compiler's message when it refused the program for the chip's memory
        (XLA:TPU checks a program's temporaries against HBM while compiling), else "".
      required_bytes: with `out_of_memory`, the bytes it said the program needs.
    """

    phase: str
    mesh: dict[str, int]
    runs: int
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    code_bytes: int
    compiler_flops: float
    compiler_bytes: float
    collectives: tuple[CollectiveRecord, ...]
    transfer_bytes: float = 0.0
    compile_seconds: float = 0.0
    out_of_memory: str = ""
    required_bytes: float = 0.0

    @property
    def peak_bytes(self) -> float:
        """Bytes a device holds while the program runs: arguments, outputs not aliased to
        (donated) arguments, temporaries and code (for a program the compiler refused, at
        least what it said it needs)."""
        compiled = (
            self.argument_bytes
            + self.output_bytes
            - self.alias_bytes
            + self.temp_bytes
            + self.code_bytes
        )
        return max(compiled, self.required_bytes)

    def comm_seconds(self, chip: Chip, *, per_iteration: bool = False) -> float:
        """Seconds of collectives per program call on `chip`'s ICI (`Chip.collective_bandwidth`
        per op); loops of unknown trip count (the decode loop) are left out, or with
        `per_iteration` they alone are counted: for one iteration of such a loop, every op in
        its body and in the loops nested in it times their trip counts (a layer scan inside
        the decode loop counts once per layer), the costliest such loop when there are several."""
        if per_iteration:
            by_loop: dict[str, float] = {}
            for op in self.collectives:
                if op.runs is None:
                    times = 1 if op.per_iteration is None else op.per_iteration
                    seconds = times * op.bytes_received / chip.collective_bandwidth(op.dims_spanned)
                    key = op.loop or op.computation
                    by_loop[key] = by_loop.get(key, 0.0) + seconds
            return max(by_loop.values(), default=0.0)
        return sum(
            op.bytes_received * op.runs / chip.collective_bandwidth(op.dims_spanned)
            for op in self.collectives
            if op.runs is not None
        )

    def collective_totals(self) -> dict[str, hlo.CollectiveTotals]:
        """Per-kind counts and bytes (`hlo.totals`)."""
        return hlo.totals(
            [hlo.Collective(op.kind, op.result_bytes, op.group_size, op.num_groups, (), op.runs,
                            op.computation, op.op_name, op.dims_spanned)
             for op in self.collectives]
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (the cache's format)."""
        out = dataclasses.asdict(self)
        out["collectives"] = [dataclasses.asdict(op) for op in self.collectives]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgramReport:
        """The inverse of `to_json`."""
        data = dict(data)
        data["collectives"] = tuple(CollectiveRecord(**op) for op in data["collectives"])
        return cls(**data)


# The packages whose code is traced into the compiled programs: a change there invalidates the
# cache; a change elsewhere (environments, runners' loops, docs) does not.
_PROGRAM_SOURCES = (
    "models", "training", "rollout", "sharding", "roles", "algorithms", "losses", "constraints",
    "advantages.py", "config", "scale/programs.py", "scale/weight_sync.py",
    "scale/hlo.py",  # reports store the parsed collectives: a parser change re-reads them
)  # fmt: skip


@functools.cache
def _source_hash() -> str:
    """A hash of the source that shapes the programs (the library's `_PROGRAM_SOURCES` and the
    kernels): a change there invalidates cached reports."""
    import kernels

    package = os.path.dirname(os.path.dirname(__file__))
    paths = [os.path.join(package, p) for p in _PROGRAM_SOURCES]
    paths.append(os.path.dirname(kernels.__file__))
    digest = hashlib.sha256()
    for path in paths:
        files = [path] if path.endswith(".py") else [
            os.path.join(folder, name)
            for folder, _, names in sorted(os.walk(path))
            for name in sorted(names)
            if name.endswith(".py")
        ]  # fmt: skip
        for file in files:
            with open(file, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()[:16]


def _versions() -> str:
    try:
        libtpu = importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        libtpu = "none"
    return f"jax {jax.__version__} libtpu {libtpu} src {_source_hash()}"


class CompileCache:
    """Program reports on disk, one JSON file per program key.

    Args:
      directory: where the files go (created); None disables caching.
    """

    def __init__(self, directory: str | None):
        self.directory = None if directory is None else os.path.expanduser(directory)
        if self.directory:
            os.makedirs(self.directory, exist_ok=True)

    def _path(self, key: str) -> str:
        name = hashlib.sha256(f"{key} {_versions()}".encode()).hexdigest()[:32]
        return os.path.join(self.directory, f"{name}.json")

    def get(self, key: str) -> ProgramReport | None:
        """The cached report of `key`, or None (also for an unreadable file)."""
        if not self.directory or not os.path.exists(self._path(key)):
            return None
        try:
            with open(self._path(key)) as f:
                return ProgramReport.from_json(json.load(f))
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def put(self, key: str, report: ProgramReport) -> None:
        """Stores `report` (atomically: a half-written file is never read)."""
        if not self.directory:
            return
        path = self._path(key)
        with open(path + ".tmp", "w") as f:
            json.dump(report.to_json(), f)
        os.replace(path + ".tmp", path)


def _cost(compiled) -> tuple[float, float]:
    costs = compiled.cost_analysis()
    if isinstance(costs, Sequence) and not isinstance(costs, dict):
        costs = costs[0] if costs else {}
    costs = costs or {}
    return float(costs.get("flops", 0.0)), float(costs.get("bytes accessed", 0.0))


def analyze(program: Program, cache: CompileCache | None = None) -> ProgramReport:
    """Compiles `program` (or reads its report from `cache`) and reports the compiler's figures.

    Raises:
      Exception: whatever the compiler raises for a program it cannot build (e.g. a layout that
        does not fit a kernel's tiling); the planner records it against the plan.
    """
    if cache is not None:
        cached = cache.get(program.key)
        if cached is not None:
            return dataclasses.replace(cached, runs=program.runs, compile_seconds=0.0)
    start = time.perf_counter()
    try:
        compiled = program.lowered.compile()
    except jax.errors.JaxRuntimeError as error:
        if "RESOURCE_EXHAUSTED" not in str(error):
            raise
        report = _out_of_memory(program, str(error), time.perf_counter() - start)
        if cache is not None:
            cache.put(program.key, report)
        return report
    seconds = time.perf_counter() - start
    memory = compiled.memory_analysis()
    flops, bytes_accessed = _cost(compiled)
    ops = hlo.collectives(compiled.as_text(), program.mesh.devices.flat)
    report = ProgramReport(
        phase=program.phase,
        mesh={k: int(v) for k, v in program.mesh.shape.items()},
        runs=program.runs,
        argument_bytes=int(memory.argument_size_in_bytes),
        output_bytes=int(memory.output_size_in_bytes),
        alias_bytes=int(memory.alias_size_in_bytes),
        temp_bytes=int(memory.temp_size_in_bytes),
        code_bytes=int(memory.generated_code_size_in_bytes),
        compiler_flops=flops,
        compiler_bytes=bytes_accessed,
        collectives=tuple(
            CollectiveRecord(
                op.kind,
                op.result_bytes,
                op.group_size,
                op.num_groups,
                op.runs,
                op.dims_spanned,
                op.computation,
                op.op_name,
                op.per_iteration,
                op.loop,
            )
            for op in ops
        ),  # fmt: skip
        compile_seconds=seconds,
    )
    if cache is not None:
        cache.put(program.key, report)
    return report


_SIZE = re.compile(r"([0-9.]+)\s*([KMGT])i?B?\b")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _out_of_memory(program: Program, message: str, seconds: float) -> ProgramReport:
    """The report of a program the compiler refused for memory, with the bytes it said it needs
    (the first size in its message, e.g. "temporaries (24.66G) exceeds available HBM (15.75G)")."""
    lines = message.splitlines()
    start = next((i for i, x in enumerate(lines) if "RESOURCE_EXHAUSTED" in x), 0)
    line = " ".join(x.strip() for x in lines[start : start + 4] if x.strip())
    line = line[line.find("RESOURCE_EXHAUSTED") :]
    sizes = [float(v) * _UNITS[u] for v, u in _SIZE.findall(line)]
    return ProgramReport(
        phase=program.phase,
        mesh={k: int(v) for k, v in program.mesh.shape.items()},
        runs=program.runs,
        argument_bytes=0,
        output_bytes=0,
        alias_bytes=0,
        temp_bytes=0,
        code_bytes=0,
        compiler_flops=0.0,
        compiler_bytes=0.0,
        collectives=(),
        compile_seconds=seconds,
        out_of_memory=line[:400],
        required_bytes=sizes[0] if sizes else 0.0,
    )
