"""Collectives read from hand-written optimized HLO: kinds, bytes, replica groups in all three
spellings, and loop trip counts (a counted scan multiplies, a data-dependent loop does not)."""

import pytest

from jaxrl_llm.scale import hlo

# A decode loop's condition: a counter bound and a data-dependent "any row live" flag.
DECODE_COND = """%decode_cond (r: (s32[], pred[])) -> pred[] {
  %r = (s32[], pred[]) parameter(0)
  %k = s32[] get-tuple-element(%r), index=0
  %limit = s32[] constant(64)
  %lt3 = pred[] compare(%k, %limit), direction=LT
  %live = pred[] get-tuple-element(%r), index=1
  ROOT %both = pred[] and(%lt3, %live)
}
"""

MODULE = (
    """HloModule jit_step, is_scheduled=true, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%scan_cond (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%inner_cond (q: (s32[], f32[8])) -> pred[] {
  %q = (s32[], f32[8]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %three = s32[] constant(3)
  ROOT %lt2 = pred[] compare(%j, %three), direction=LT
}

%inner_body (q: (s32[], f32[8])) -> (s32[], f32[8]) {
  %q = (s32[], f32[8]) parameter(0)
  %y = f32[8]{0} get-tuple-element(%q), index=1
  %rs = f32[2]{0} reduce-scatter(%y), channel_id=4, replica_groups=[1,4]<=[4], dimensions={0}, to_apply=%add
  ROOT %t2 = (s32[], f32[8]) tuple(%j, %y)
}

%scan_body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]) parameter(0)
  %x = bf16[4,2]{1,0} get-tuple-element(%p), index=1
  %ag = bf16[4,4]{1,0:T(8,128)} all-gather(%x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={1}, metadata={op_name="jit(step)/while/body/dot_general"}
  %w2 = (s32[], f32[8]) while(%p), condition=%inner_cond, body=%inner_body
  ROOT %t = (s32[], f32[8]) tuple(%i, %x)
}

"""
    + DECODE_COND
    + """

%decode_body (r: (s32[], pred[])) -> (s32[], pred[]) {
  %r = (s32[], pred[]) parameter(0)
  %h = f32[16]{0} parameter(1)
  %ar2 = f32[16]{0} all-reduce(%h), channel_id=3, replica_groups=mesh['axis_0'=2,'axis_1'=2] {'axis_1'}, to_apply=%add
  ROOT %t3 = (s32[], pred[]) tuple(%k, %live)
}

ENTRY %main (a: f32[1024], w: (s32[], f32[8])) -> f32[1024] {
  %a = f32[1024]{0} parameter(0)
  %ar = f32[1024]{0} all-reduce(%a), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), to_apply=%add
  %loop = (s32[], f32[8]) while(%w), condition=%scan_cond, body=%scan_body
  %dec = (s32[], pred[]) while(%w), condition=%decode_cond, body=%decode_body
  %cp = f32[1024]{0} collective-permute(%ar), channel_id=5, source_target_pairs={{0,1},{1,0}}
  ROOT %out = f32[1024]{0} copy(%cp)
}
"""
)


def _by_kind():
    return {op.kind: op for op in hlo.collectives(MODULE)}


def test_kinds_bytes_and_groups():
    ops = _by_kind()
    kinds = sorted(op.kind for op in hlo.collectives(MODULE))
    assert kinds == [
        "all-gather", "all-reduce", "all-reduce", "collective-permute", "reduce-scatter"
    ]  # fmt: skip
    ag = ops["all-gather"]
    assert ag.result_bytes == 4 * 4 * 2  # bf16[4,4]
    assert ag.groups == ((0, 1), (2, 3)) and ag.group_size == 2
    assert ag.op_name == "jit(step)/while/body/dot_general"
    assert ag.bytes_received == 32 * (2 - 1) / 2
    permute = ops["collective-permute"]
    assert permute.bytes_received == 4096


def test_iota_and_mesh_replica_groups():
    ops = hlo.collectives(MODULE)
    entry_ar = next(op for op in ops if op.kind == "all-reduce" and op.computation == "main")
    # [2,2]<=[2,2]T(1,0): the transpose of [[0,1],[2,3]] -> groups {0,2} and {1,3}.
    assert entry_ar.groups == ((0, 2), (1, 3))
    assert entry_ar.bytes_received == 2 * 4096 * (2 - 1) / 2
    decode_ar = next(op for op in ops if op.computation == "decode_body")
    # mesh['axis_0'=2,'axis_1'=2] {'axis_1'}: devices that differ in axis_1 -> {0,1}, {2,3}.
    assert decode_ar.groups == ((0, 1), (2, 3))
    rs = next(op for op in ops if op.kind == "reduce-scatter")
    assert rs.groups == ((0, 1, 2, 3),) and rs.bytes_received == 8 * 3


def test_trip_counts_multiply_and_data_dependent_loops_do_not():
    ops = hlo.collectives(MODULE)
    runs = {op.computation: op.runs for op in ops}
    assert runs["main"] == 1
    assert runs["scan_body"] == 5  # i < 5
    assert runs["inner_body"] == 15  # 5 x 3, nested
    assert runs["decode_body"] is None  # k < 64 and live: stops on data
    totals = hlo.totals(ops)
    assert totals["reduce-scatter"].executions == 15
    assert totals["all-reduce"].in_unbounded_loops == 1


def test_shape_bytes():
    assert hlo.shape_bytes("bf16[4,8]{1,0:T(8,128)(2,1)}") == 64
    assert hlo.shape_bytes("(f32[2], s32[])") == 12
    assert hlo.shape_bytes("pred[]") == 1


def test_no_entry_is_an_error():
    with pytest.raises(ValueError, match="ENTRY"):
        hlo.collectives("HloModule x\n")


def test_known_trip_count_in_backend_config():
    """XLA:CPU and GPU write the count on the while op; it wins over the condition."""
    text = """HloModule m, num_partitions=2

%cond (p: (s32[], f32[4])) -> pred[] {
  %p = (s32[], f32[4]) parameter(0)
  ROOT %go = pred[] get-tuple-element(%p), index=0
}

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]) parameter(0)
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %ag = f32[8]{0} all-gather(%x), replica_groups={{0,1}}, dimensions={0}
  ROOT %t = (s32[], f32[4]) tuple(%i, %x)
}

ENTRY %main (w: (s32[], f32[4])) -> (s32[], f32[4]) {
  %w = (s32[], f32[4]) parameter(0)
  ROOT %loop = (s32[], f32[4]) while(%w), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"7"}}
}
"""
    [op] = hlo.collectives(text)
    assert op.runs == 7 and op.bytes_received == 32 / 2


# Async collectives as XLA writes them. The collective-permute-start line is from a TPU v5e 2x2
# program compiled on this CPU (jax.shard_map of lax.ppermute, 2026-11-25), its backend config
# cut; XLA gives all-reduce-start its results' shape, a tuple for several operands.
ASYNC = """HloModule jit_f, is_scheduled=true, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (param.2: f32[1,1024], p1: f32[1,16], p2: f32[1,4], p3: bf16[1,4], p4: f32[2]) -> f32[1,1024] {
  %param.2 = f32[1,1024]{1,0:T(1,128)} parameter(0)
  %p1 = f32[1,16]{1,0} parameter(1)
  %p2 = f32[1,4]{1,0} parameter(2)
  %p3 = bf16[1,4]{1,0} parameter(3)
  %p4 = f32[2]{0} parameter(4)
  %collective-permute-start = (f32[1,1024]{1,0:T(1,128)}, f32[1,1024]{1,0:T(1,128)S(1)}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%param.2), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}, metadata={op_name="jit(f)/shard_map/ppermute" stack_frame_id=5}
  %collective-permute-done = f32[1,1024]{1,0:T(1,128)S(1)} collective-permute-done(%collective-permute-start)
  %all-reduce-start = (f32[1,16]{1,0}, f32[1,4]{1,0}) all-reduce-start(%p1, %p2), channel_id=2, replica_groups={{0,1,2,3}}, to_apply=%add
  %all-reduce-done = (f32[1,16]{1,0}, f32[1,4]{1,0}) all-reduce-done(%all-reduce-start)
  %all-gather-start = ((bf16[1,4]{1,0}, f32[2]{0}), (bf16[4,4]{1,0}, f32[8]{0})) all-gather-start(%p3, %p4), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}
  %all-gather-done = (bf16[4,4]{1,0}, f32[8]{0}) all-gather-done(%all-gather-start)
  ROOT %out = f32[1,1024]{1,0} copy(%collective-permute-done)
}
"""


def test_async_start_ops_count_their_results():
    ops = {op.kind: op for op in hlo.collectives(ASYNC)}
    assert set(ops) == {"collective-permute", "all-reduce", "all-gather"}
    # the permuted array, not the two u32 context scalars after it (8 bytes before the fix)
    assert ops["collective-permute"].result_bytes == 1024 * 4
    assert ops["collective-permute"].bytes_received == 4096.0
    # every result of a two-operand all-reduce-start (it has no operand half)
    assert ops["all-reduce"].result_bytes == (16 + 4) * 4
    # the results tuple of a two-operand all-gather-start, not its operands
    assert ops["all-gather"].result_bytes == 16 * 2 + 8 * 4


def test_tuple_elements_keep_nested_tuples_whole():
    assert hlo.tuple_elements("((f32[2], f32[3]{0}), (f32[4], f32[6]), u32[])") == [
        "(f32[2], f32[3]{0})",
        "(f32[4], f32[6])",
        "u32[]",
    ]
    assert hlo.tuple_elements("f32[1,2]{1,0}") == ["f32[1,2]{1,0}"]


# A decode loop of unknown trip count (it also stops on data) whose body holds its own
# all-reduce and a layer scan of 4 iterations with an all-gather in it.
NESTED = (
    """HloModule jit_decode, is_scheduled=true, num_partitions=4

%layer_cond (q: (s32[], f32[8])) -> pred[] {
  %q = (s32[], f32[8]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %four = s32[] constant(4)
  ROOT %lt = pred[] compare(%j, %four), direction=LT
}

%layer_body (q: (s32[], f32[8])) -> (s32[], f32[8]) {
  %q = (s32[], f32[8]) parameter(0)
  %y = f32[2]{0} get-tuple-element(%q), index=1
  %ag = f32[8]{0} all-gather(%y), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %t = (s32[], f32[8]) tuple(%j, %ag)
}

"""
    + DECODE_COND
    + """

%decode_body (r: (s32[], pred[])) -> (s32[], pred[]) {
  %r = (s32[], pred[]) parameter(0)
  %h = f32[16]{0} parameter(1)
  %ar = f32[16]{0} all-reduce(%h), channel_id=2, replica_groups={{0,1,2,3}}, to_apply=%add
  %layers = (s32[], f32[8]) while(%r), condition=%layer_cond, body=%layer_body
  ROOT %t3 = (s32[], pred[]) tuple(%k, %live)
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p: (s32[], pred[])) -> (s32[], pred[]) {
  %p = (s32[], pred[]) parameter(0)
  ROOT %w = (s32[], pred[]) while(%p), condition=%decode_cond, body=%decode_body
}
"""
)


def test_nested_loops_count_per_iteration_of_the_unknown_loop():
    ops = {op.kind: op for op in hlo.collectives(NESTED)}
    assert ops["all-reduce"].runs is None and ops["all-gather"].runs is None
    assert ops["all-reduce"].per_iteration == 1 and ops["all-gather"].per_iteration == 4
    assert ops["all-reduce"].loop == ops["all-gather"].loop == "decode_body"


def test_per_iteration_seconds_sum_the_body_and_its_nested_scan():
    from jaxrl_llm.scale.analysis import CollectiveRecord, ProgramReport
    from jaxrl_llm.scale.chips import chip

    records = tuple(
        CollectiveRecord(op.kind, op.result_bytes, op.group_size, op.num_groups, op.runs,
                         op.dims_spanned, op.computation, op.op_name, op.per_iteration, op.loop)
        for op in hlo.collectives(NESTED)
    )  # fmt: skip
    report = ProgramReport("decode", {"data": 4}, 1, 0, 0, 0, 0, 0, 0.0, 0.0, records)
    v5e = chip("v5e")
    # all-reduce of 64 bytes over 4: 2 * 64 * 3/4 = 96; all-gather of 32 bytes: 32 * 3/4 = 24,
    # four times a decode step (the old "largest computation" rule gave max(96, 24) = 96)
    expected = (96 + 4 * 24) / v5e.collective_bandwidth(1)
    assert report.comm_seconds(v5e, per_iteration=True) == pytest.approx(expected)
    assert report.comm_seconds(v5e) == 0.0  # nothing outside the unknown loop
