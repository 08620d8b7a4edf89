"""Sequence packing: several variable-length sequences per row, so padding costs no compute.

A rollout batch is [B, T] with each row holding one sequence of L_b <= T real tokens (prompt
and completion, left-aligned) and T - L_b padding. The train step's cost is proportional to
B * T; packing places the sequences into R <= B rows of the same width T, first-fit
decreasing, and the model keeps them apart with per-token segment ids (attention only within a
segment) and positions that restart at 0 for each sequence, so every sequence's log-probs are
those of its own unpacked row. See "Efficient Sequence Packing without Cross-contamination"
(Krell et al., arXiv:2107.02027).

    plan = plan_packing(lengths_b, width=T, row_multiple=4)
    tokens_rw = pack(tokens_bt, plan, fill=pad_id)          # [R, T]
    segments_rw, positions_rw = plan.segment_ids, plan.positions

R is rounded up to a multiple of `row_multiple`, so a run sees few distinct shapes (each new one
compiles the train step once). Padding rows and tails have segment id 0 and loss mask 0.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class PackingPlan(NamedTuple):
    """Where each sequence goes.

    Attributes:
      row: int [B], the packed row of sequence b.
      offset: int [B], the column where sequence b starts in that row.
      length: int [B], L_b, the number of columns sequence b takes.
      num_rows: R, packed rows (a multiple of the `row_multiple` it was planned with).
      width: T, the row width.
      segment_ids: int32 [R, T], b + 1 where sequence b sits, 0 on padding.
      positions: int32 [R, T], 0..L_b - 1 within each sequence, 0 on padding.
    """

    row: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    num_rows: int
    width: int
    segment_ids: np.ndarray
    positions: np.ndarray


def plan_packing(lengths_b, *, width: int, row_multiple: int = 1) -> PackingPlan:
    """First-fit-decreasing placement of sequences of `lengths_b` into rows of `width`.

    Args:
      lengths_b: int [B], each in [1, width]; ties keep their original order.
      width: T, the row width (the rollout's width, so that every sequence fits).
      row_multiple: round the row count up to a multiple of this (few compiled shapes).

    Returns:
      A `PackingPlan`.
    """
    lengths_b = np.asarray(lengths_b, np.int64)
    if lengths_b.ndim != 1 or lengths_b.size == 0:
        raise ValueError(f"plan_packing: lengths_b must be a non-empty [B], got {lengths_b.shape}.")
    if lengths_b.min() < 1 or lengths_b.max() > width:
        raise ValueError(
            f"plan_packing: lengths must be in [1, width={width}], got "
            f"{lengths_b.min()}..{lengths_b.max()}."
        )
    if row_multiple < 1:
        raise ValueError(f"plan_packing: row_multiple={row_multiple} must be >= 1.")
    row = np.zeros_like(lengths_b)
    offset = np.zeros_like(lengths_b)
    used: list[int] = []  # columns taken in each open row
    for b in np.argsort(-lengths_b, kind="stable"):
        n = int(lengths_b[b])
        r = next((i for i, u in enumerate(used) if u + n <= width), len(used))
        if r == len(used):
            used.append(0)
        row[b], offset[b] = r, used[r]
        used[r] += n
    num_rows = -(-len(used) // row_multiple) * row_multiple
    segment_ids = np.zeros((num_rows, width), np.int32)
    positions = np.zeros((num_rows, width), np.int32)
    for b, (r, o, n) in enumerate(zip(row, offset, lengths_b, strict=True)):
        segment_ids[r, o : o + n] = b + 1
        positions[r, o : o + n] = np.arange(n)
    return PackingPlan(row, offset, lengths_b, num_rows, width, segment_ids, positions)


def pack(x_bt, plan: PackingPlan, *, fill=0) -> np.ndarray:
    """Packs a per-token array [B, T', ...] (T' >= each L_b) into [R, T, ...] by `plan`.

    Sequence b's first L_b columns go to row `plan.row[b]` from column `plan.offset[b]`;
    everything else is `fill`. A per-sequence array [B] is broadcast over its segment.
    """
    x = np.asarray(x_bt)
    if x.shape[0] != plan.row.shape[0]:
        raise ValueError(f"pack: {x.shape[0]} rows, the plan has {plan.row.shape[0]} sequences.")
    per_sequence = x.ndim == 1
    trailing = () if per_sequence else x.shape[2:]
    out = np.full((plan.num_rows, plan.width) + trailing, fill, x.dtype)
    for b, (r, o, n) in enumerate(zip(plan.row, plan.offset, plan.length, strict=True)):
        out[r, o : o + n] = x[b] if per_sequence else x[b, :n]
    return out


def unpack(x_rw, plan: PackingPlan, *, width: int | None = None, fill=0) -> np.ndarray:
    """The inverse of `pack` for per-token arrays: [R, T, ...] -> [B, width, ...]."""
    x = np.asarray(x_rw)
    width = plan.width if width is None else width
    out = np.full((plan.row.shape[0], width) + x.shape[2:], fill, x.dtype)
    for b, (r, o, n) in enumerate(zip(plan.row, plan.offset, plan.length, strict=True)):
        out[b, :n] = x[r, o : o + n]
    return out
