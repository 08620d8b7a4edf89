"""The collectives of a compiled program, read from its optimized HLO text.

    ops = collectives(compiled.as_text(), devices=mesh.devices.flat)

Each `Collective` is one all-gather, all-reduce, reduce-scatter, all-to-all or
collective-permute after SPMD partitioning, with its result bytes, replica groups and how many
times it runs per call of the program: a collective inside a `lax.scan` (the layer scan of the
train step) runs once per iteration, so its computation's multiplier is the product of the trip
counts of the while loops around it. A trip count is the `known_trip_count` XLA:CPU and GPU write on
the while op, or else read from the loop's condition when it is exactly `counter < constant`
(XLA:TPU's text); a loop whose end depends on data (the decode loop) has no known count and its
collectives get `runs=None` ("per iteration").

Replica groups come in three spellings, all handled: explicit lists `{{0,1},{2,3}}`, the iota
form `[2,2]<=[4]` (with an optional transpose `T(1,0)`), and the mesh form
`mesh['axis_0'=4,'axis_1'=4] {'axis_1'}`. Ids index the program's device assignment (the mesh's
devices in row-major order), so with `devices` given each group is mapped to physical chips and
`dims_spanned` says how many torus dimensions the collective crosses (see `scale.chips`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxrl_llm.scale.topology import dims_spanned as _dims_spanned

COLLECTIVE_KINDS = (
    "all-gather",
    "all-reduce",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
)
# GPU / CPU spell async collectives as <kind>-start ... <kind>-done; count the start only.
_OPCODE_KIND = {kind: kind for kind in COLLECTIVE_KINDS}
_OPCODE_KIND.update({f"{kind}-start": kind for kind in COLLECTIVE_KINDS})
_OPCODE_KIND["ragged-all-to-all"] = "all-to-all"

_DTYPE_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
    "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1,
    "s4": 1, "u4": 1, "token": 0,
}  # fmt: skip
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\]")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_CALLEE = re.compile(
    r"\b(calls|to_apply|body|condition|true_computation|false_computation)=%?([\w.\-]+)"
)
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_KNOWN_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


class Collective(NamedTuple):
    """One collective of a compiled program.

    Attributes:
      kind: one of `COLLECTIVE_KINDS`.
      result_bytes: bytes of its result on each device (for a tuple, the sum).
      group_size: devices per replica group (n).
      num_groups: replica groups.
      groups: the groups as device indices of the program's assignment.
      runs: executions per call of the program (product of enclosing trip counts), or None
        inside a loop of unknown trip count.
      computation: the HLO computation holding it.
      op_name: the JAX source path from its metadata (e.g. ".../while/body/...").
      dims_spanned: torus dimensions its groups cross (0 when devices were not given).
      per_iteration: with `runs=None`, executions per iteration of the innermost enclosing
        loop of unknown trip count (the product of the known trip counts between that loop's
        body and the op: a layer scan inside the decode loop multiplies by the layers); else
        None.
      loop: with `runs=None`, the body computation of that loop; else "".
    """

    kind: str
    result_bytes: int
    group_size: int
    num_groups: int
    groups: tuple[tuple[int, ...], ...]
    runs: int | None
    computation: str
    op_name: str
    dims_spanned: int = 0
    per_iteration: int | None = None
    loop: str = ""

    @property
    def bytes_received(self) -> float:
        """Bytes each device receives per execution in a ring implementation:
        all-gather S(n-1)/n of its result S; reduce-scatter S(n-1) (its input is nS);
        all-reduce 2S(n-1)/n; all-to-all S(n-1)/n; collective-permute S."""
        s, n = self.result_bytes, self.group_size
        if n <= 1 and self.kind != "collective-permute":
            return 0.0
        if self.kind == "all-gather" or self.kind == "all-to-all":
            return s * (n - 1) / n
        if self.kind == "reduce-scatter":
            return s * (n - 1)
        if self.kind == "all-reduce":
            return 2 * s * (n - 1) / n
        return float(s)


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape string: "bf16[4,8]{1,0}" or a tuple "(f32[2], s32[])"."""
    total = 0
    for dtype, dims in _ARRAY.findall(shape):
        size = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
        total += size * _DTYPE_BYTES.get(dtype, 4)
    return total


def _split_shape(rest: str) -> tuple[str, str]:
    """(shape, text after it) of an instruction's right-hand side."""
    rest = rest.strip()
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return rest[: i + 1], rest[i + 1 :].strip()
    shape, _, after = rest.partition(" ")
    return shape, after.strip()


class _Instruction(NamedTuple):
    name: str
    shape: str
    opcode: str
    text: str
    root: bool


def _parse(text: str) -> tuple[dict[str, list[_Instruction]], str | None]:
    """Computations (name -> instructions) of an HLO module's text, and the entry's name."""
    computations: dict[str, list[_Instruction]] = {}
    entry, current = None, None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header and not line.startswith(" "):
            current = header.group(1)
            computations[current] = []
            if line.startswith("ENTRY"):
                entry = current
            continue
        if current is None:
            continue
        if line.startswith("}"):
            current = None
            continue
        match = _INSTR.match(line)
        if not match:
            continue
        shape, after = _split_shape(match.group(2))
        opcode = after.split("(", 1)[0].strip()
        root = line.lstrip().startswith("ROOT ")
        computations[current].append(_Instruction(match.group(1), shape, opcode, line, root))
    return computations, entry


def _trip_count(condition: list[_Instruction]) -> int | None:
    """N of a condition that is exactly `counter < N` with a constant N (its root), else None:
    a loop that may also stop on data (`i < N and live rows > 0`) has no known count."""
    constants = {}
    for ins in condition:
        m = re.search(r"\bconstant\((-?\d+)\)", ins.text)
        if ins.opcode == "constant" and m and re.match(r"[su](32|64)\[\]", ins.shape):
            constants[ins.name] = int(m.group(1))
    for ins in condition:
        if not ins.root or ins.opcode != "compare" or "direction=LT" not in ins.text:
            continue
        operands = re.findall(r"%([\w.\-]+)", ins.text.split("compare(", 1)[1].split(")", 1)[0])
        if len(operands) == 2 and operands[1] in constants:
            return constants[operands[1]]
    return None


def _multipliers(
    computations, entry: str
) -> tuple[dict[str, int | None], dict[str, tuple[str, int]]]:
    """Executions per program call of every computation reachable from the entry, and for the
    computations inside a loop of unknown trip count, (that loop's body, executions per
    iteration of it)."""
    runs: dict[str, int | None] = {entry: 1}
    local: dict[str, tuple[str, int]] = {}
    stack = [entry]
    while stack:
        name = stack.pop()
        for ins in computations.get(name, ()):
            callees = [(attr, callee) for attr, callee in _CALLEE.findall(ins.text)]
            branches = _BRANCHES.search(ins.text)
            if branches:
                callees += [("branch", c.strip().lstrip("%")) for c in branches.group(1).split(",")]
            trip = None
            if ins.opcode == "while":
                known = _KNOWN_TRIP.search(ins.text)  # XLA:CPU / GPU state it in backend_config
                condition = dict(callees).get("condition")
                trip = (
                    int(known.group(1)) if known else _trip_count(computations.get(condition, []))
                )
            for attr, callee in callees:
                if callee not in computations or attr in ("to_apply",):
                    continue
                outer = runs[name]
                if attr == "body":
                    inner = None if (outer is None or trip is None) else outer * trip
                elif attr == "condition":
                    inner = None if (outer is None or trip is None) else outer * (trip + 1)
                else:
                    inner = outer
                # per iteration of the innermost unknown loop: a new one starts at its body
                if attr in ("body", "condition") and trip is None:
                    mine = (callee if attr == "body" else dict(callees)["body"], 1)
                elif name in local:
                    times = {"body": trip, "condition": (trip or 0) + 1}.get(attr, 1)
                    mine = (local[name][0], local[name][1] * times)
                else:
                    mine = None
                if callee in runs:  # reached twice (shared computation): add up
                    old = runs[callee]
                    runs[callee] = None if old is None or inner is None else old + inner
                    if mine is not None and callee in local and local[callee][0] == mine[0]:
                        local[callee] = (mine[0], local[callee][1] + mine[1])
                    continue
                runs[callee] = inner
                if mine is not None:
                    local[callee] = mine
                stack.append(callee)
    return runs, local


def _groups(ins_text: str, num_devices: int | None) -> tuple[tuple[int, ...], ...]:
    """Replica groups of an instruction (see the module docstring for the three forms)."""
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", ins_text)
    if mesh:
        axes = re.findall(r"'([^']+)'=(\d+)", mesh.group(1))
        names = [a for a, _ in axes]
        sizes = [int(s) for _, s in axes]
        grouped = [names.index(a) for a in re.findall(r"'([^']+)'", mesh.group(2))]
        ids = np.arange(math.prod(sizes)).reshape(sizes)
        others = [i for i in range(len(sizes)) if i not in grouped]
        ids = ids.transpose(others + grouped).reshape(-1, math.prod([sizes[i] for i in grouped]))
        return tuple(tuple(int(x) for x in row) for row in ids)
    iota = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", ins_text)
    if iota:
        out_shape = [int(x) for x in iota.group(1).split(",")]
        reshape = [int(x) for x in iota.group(2).split(",")]
        ids = np.arange(math.prod(reshape)).reshape(reshape)
        if iota.group(3):
            ids = ids.transpose([int(x) for x in iota.group(3).split(",")])
        ids = ids.reshape(out_shape)
        return tuple(tuple(int(x) for x in row) for row in ids.reshape(out_shape[0], -1))
    explicit = re.search(r"replica_groups=\{((?:\{[\d,\s]*\},?\s*)*)\}", ins_text)
    if explicit and explicit.group(1).strip():
        return tuple(
            tuple(int(x) for x in g.split(",") if x.strip())
            for g in re.findall(r"\{([\d,\s]*)\}", explicit.group(1))
        )
    pairs = re.search(r"source_target_pairs=\{(.*?)\}\}", ins_text)
    if pairs:
        return tuple(
            tuple(int(x) for x in p.split(",")) for p in re.findall(r"\{(\d+,\d+)", pairs.group(0))
        )
    # No groups written: every device in one group.
    return (tuple(range(num_devices)),) if num_devices else ((),)


def tuple_elements(shape: str) -> list[str]:
    """The top-level elements of an HLO tuple shape, nested tuples kept whole:
    "((f32[2], f32[3]), (f32[4], f32[6]), u32[])" -> ["(f32[2], f32[3])", "(f32[4], f32[6])",
    "u32[]"]; a shape that is no tuple is its only element."""
    shape = shape.strip()
    if not shape.startswith("("):
        return [shape]
    elements, depth, start = [], 0, 1
    for i, char in enumerate(shape):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:  # the tuple's closing parenthesis
                elements.append(shape[start:i].strip())
                break
        elif char == "," and depth == 1:
            elements.append(shape[start:i].strip())
            start = i + 1
    return [e for e in elements if e]


def async_result_shape(opcode: str, shape: str) -> str:
    """The shape of what an (async) collective delivers, from its instruction's shape.

    A synchronous collective's shape is its result. Of the async `-start` forms, XLA gives
    `all-reduce-start` the result's shape (a tuple when it reduces several operands), and the
    others the tuple (operands, results[, context scalars]): `collective-permute-start` is
    (operand, result, u32[], u32[]), `all-gather-start` (operand, result) or ((operands),
    (results)); the result is the second top-level element.
    """
    if not opcode.endswith("-start") or opcode == "all-reduce-start":
        return shape
    elements = tuple_elements(shape)
    return elements[1] if len(elements) >= 2 else shape


def collectives(text: str, devices: Sequence | None = None) -> list[Collective]:
    """Every collective of an optimized HLO module (`compiled.as_text()`).

    Args:
      text: the module's text.
      devices: the program's device assignment (e.g. `mesh.devices.flat`), to map replica
        groups to chips and count the torus dimensions they span; None skips that.

    Returns:
      `Collective`s in text order.
    """
    computations, entry = _parse(text)
    if entry is None:
        raise ValueError("collectives: no ENTRY computation in this HLO text.")
    runs, local = _multipliers(computations, entry)
    devices = list(devices) if devices is not None else None
    partitions = re.search(r"num_partitions=(\d+)", text)
    num_devices = len(devices) if devices else (int(partitions.group(1)) if partitions else None)
    out = []
    for comp_name, instructions in computations.items():
        if comp_name not in runs:
            continue
        for ins in instructions:
            kind = _OPCODE_KIND.get(ins.opcode)
            if kind is None:
                continue
            groups = _groups(ins.text, num_devices)
            size = max(len(g) for g in groups) if groups else 1
            if kind == "collective-permute":
                size = 2
            spanned = 0
            if devices:
                spanned = max(
                    (_dims_spanned([devices[i] for i in g if i < len(devices)]) for g in groups),
                    default=0,
                )
            op_name = _OP_NAME.search(ins.text)
            result_shape = async_result_shape(ins.opcode, ins.shape)
            out.append(
                Collective(
                    kind=kind,
                    result_bytes=shape_bytes(result_shape),
                    group_size=size,
                    num_groups=len(groups),
                    groups=groups,
                    runs=runs[comp_name],
                    computation=comp_name,
                    op_name=op_name.group(1) if op_name else "",
                    dims_spanned=spanned,
                    per_iteration=local[comp_name][1] if runs[comp_name] is None else None,
                    loop=local[comp_name][0] if runs[comp_name] is None else "",
                )
            )
    return out


class CollectiveTotals(NamedTuple):
    """Per-kind totals of a program's collectives.

    Attributes:
      count: collective ops in the text (each counted once).
      executions: executions per program call (ops in loops of unknown count counted once).
      bytes_received: bytes each device receives per program call (ring model, see
        `Collective.bytes_received`), loops of unknown count counted once.
      in_unbounded_loops: ops inside loops of unknown trip count.
    """

    count: int
    executions: int
    bytes_received: float
    in_unbounded_loops: int


def totals(ops: Sequence[Collective]) -> dict[str, CollectiveTotals]:
    """`CollectiveTotals` per kind (kinds with no op are left out)."""
    out = {}
    for kind in COLLECTIVE_KINDS:
        mine = [op for op in ops if op.kind == kind]
        if not mine:
            continue
        runs = [1 if op.runs is None else op.runs for op in mine]
        out[kind] = CollectiveTotals(
            count=len(mine),
            executions=sum(runs),
            bytes_received=sum(op.bytes_received * r for op, r in zip(mine, runs, strict=True)),
            in_unbounded_loops=sum(op.runs is None for op in mine),
        )
    return out
