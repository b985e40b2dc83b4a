"""Plans (csrc/plan/plan.c): the one place that decides how a request is carried out.

mlc_plan_make is a pure function of the request and the team's settings, so it is tested here
without MPI, through the core's cffi module.
"""

from __future__ import annotations

import pytest
from core_internals import ffi, lib

KIB, MIB = 1024, 1024 * 1024
TEAM = dict(
    algorithm=lib.MLC_ALG_AUTO, nthreads=2, chunk_bytes=256 * KIB, window_segments=16,
    latency_bytes=512 * KIB, inline_bytes=4 * MIB, direct_bytes=4 * KIB,
    rabenseifner_bytes=0,  # never: the tests below see the ring's rule alone
    submit_bytes=1 * MIB,
)  # fmt: skip
RABENSEIFNER_BYTES = 8 * MIB


def plan(total: int, **overrides):
    fields = dict(TEAM, kind=lib.MLC_KIND_ALLREDUCE, dtype=lib.MLC_FLOAT32, ntensors=1,
                  total=total, in_place=1, is_group=0, blocking=1, nranks=4, checked=1)  # fmt: skip
    fields.update(overrides)
    inp = ffi.new("mlc_plan_input *", fields)
    out = ffi.new("mlc_plan *")
    lib.mlc_plan_make(inp, out)
    return out


def test_small_allreduce_rides_the_agreement_exchange():
    p = plan(1024)  # 4 KiB
    assert (p.algorithm, p.direct, p.on_caller) == (lib.MLC_ALG_DIRECT, 1, 1)
    assert plan(1025).direct == 0  # one element over the threshold
    assert plan(1024, checked=0).direct == 0  # no exchange to ride
    assert plan(1024, algorithm=lib.MLC_ALG_RING).direct == 0  # the user chose an algorithm
    assert plan(1024, is_group=1, blocking=0).direct == 0  # a group's tensors come later


def test_latency_path_below_the_threshold_ring_above():
    below, above = plan(512 * KIB // 4 - 1), plan(512 * KIB // 4)
    assert below.algorithm == lib.MLC_ALG_RECURSIVE_DOUBLING
    assert above.algorithm == lib.MLC_ALG_RING
    # On the caller, recursive doubling takes the whole buffer as one segment.
    assert (below.on_caller, below.lanes, below.nseg) == (1, 1, 1)
    assert below.seg_elems == 512 * KIB // 4 - 1


def test_keyed_groups_take_the_ring_on_the_team_threads():
    p = plan(10, is_group=1, blocking=0, ntensors=3, in_place=0)
    assert (p.algorithm, p.direct, p.on_caller, p.lanes, p.fused) == (lib.MLC_ALG_RING, 0, 0, 2, 1)
    assert p.window == TEAM["window_segments"]


@pytest.mark.parametrize("blocking, nbytes, on_caller", [(1, 4 * MIB, 1), (1, 4 * MIB + 4, 0),
                                                         (0, 1 * MIB, 0)])  # fmt: skip
def test_blocking_calls_up_to_the_inline_threshold_stay_on_the_caller(blocking, nbytes, on_caller):
    p = plan(nbytes // 4, blocking=blocking)
    assert p.on_caller == on_caller
    assert p.lanes == (1 if on_caller else TEAM["nthreads"])


def test_forced_recursive_doubling_above_the_latency_threshold_goes_to_the_threads():
    p = plan(MIB // 4, algorithm=lib.MLC_ALG_RECURSIVE_DOUBLING)
    assert (p.algorithm, p.on_caller, p.lanes) == (lib.MLC_ALG_RECURSIVE_DOUBLING, 0, 2)


def test_fusion_window():
    assert plan(MIB, ntensors=5, in_place=0).window == 2  # one ring batch (MLC_RING_BATCH)
    assert plan(MIB, ntensors=5, in_place=0, blocking=0).window == TEAM["window_segments"]
    single = plan(MIB, blocking=0)
    assert single.window == single.nseg  # one tensor: reduced where it lies


def test_nothing_to_move():
    assert plan(0, checked=0).nothing == 1
    assert plan(100, checked=0, nranks=1).nothing == 1
    assert plan(100, checked=0, nranks=1, in_place=0).nothing == 0  # the copy is still due
    assert plan(0, checked=1).nothing == 0  # ranks must still agree on it
    assert plan(0, checked=0, blocking=0).nothing == 0  # async: the caller waits on a request


@pytest.mark.parametrize("total", [0, 1, 7, 8191, 8192, 65536, 1_000_003, 50_000_000])
@pytest.mark.parametrize("lanes_blocking", [0, 1])
def test_segments_cover_the_request_exactly_once(total, lanes_blocking):
    p = plan(total, blocking=lanes_blocking, algorithm=lib.MLC_ALG_RING)
    assert p.seg_elems >= 1
    assert p.nseg * p.seg_elems >= total > (p.nseg - 1) * p.seg_elems if total else p.nseg == 0
    assert p.seg_elems * 4 <= TEAM["chunk_bytes"]


def test_broadcast_plans():
    small = plan(100, kind=lib.MLC_KIND_BROADCAST)
    assert (small.algorithm, small.on_caller, small.seg_elems) == (-1, 1, 0)  # whole tensors
    large = plan(MIB, kind=lib.MLC_KIND_BROADCAST)
    assert (large.on_caller, large.lanes, large.seg_elems) == (0, 2, TEAM["chunk_bytes"] // 4)


def test_algorithm_table():
    names = [lib.mlc_algorithm_name(i) for i in (lib.MLC_ALG_RING,
             lib.MLC_ALG_RECURSIVE_DOUBLING, lib.MLC_ALG_DIRECT)]  # fmt: skip
    assert [ffi.string(n).decode() for n in names] == ["ring", "recursive_doubling", "direct"]
    assert lib.mlc_algorithm_count() == 7
    rows = (
        lib.MLC_ALG_ALLGATHERV_RING,
        lib.MLC_ALG_REDUCE_SCATTERV_RING,
        lib.MLC_ALG_ALLTOALLV_PAIRWISE,
    )
    assert [ffi.string(lib.mlc_algorithm_name(i)).decode() for i in rows] == [
        "allgatherv_ring", "reduce_scatterv_ring", "alltoallv_pairwise"]  # fmt: skip


@pytest.mark.parametrize(
    "kind, algorithm",
    [
        ("ALLGATHER", "ALLGATHERV_RING"),
        ("REDUCESCATTER", "REDUCE_SCATTERV_RING"),
        ("ALLTOALL", "ALLTOALLV_PAIRWISE"),
    ],  # fmt: skip
)
def test_collectives_of_rows_take_their_row_on_the_caller(kind, algorithm):
    for total in (0, 1024, 64 * MIB):
        p = plan(total, kind=getattr(lib, f"MLC_KIND_{kind}"))
        assert (p.algorithm, p.on_caller, p.lanes, p.direct) == (
            getattr(lib, f"MLC_ALG_{algorithm}"),
            1,
            1,
            0,
        )


@pytest.mark.parametrize("op", ["MIN", "MAX", "PRODUCT"])
def test_min_max_product_never_ride_the_exchange_nor_16_bits(op):
    code = getattr(lib, f"MLC_OP_{op}")
    assert plan(1024, op=code).direct == 0  # the exchange only adds
    assert plan(1024, op=code).algorithm == lib.MLC_ALG_RECURSIVE_DOUBLING
    big = plan(64 * MIB, op=code, compression=lib.MLC_COMPRESSION_BF16)
    assert (big.algorithm, big.compression) == (lib.MLC_ALG_RING, lib.MLC_COMPRESSION_NONE)
    assert (
        plan(64 * MIB, compression=lib.MLC_COMPRESSION_BF16).compression == lib.MLC_COMPRESSION_BF16
    )
    assert ffi.string(lib.mlc_algorithm_name(lib.MLC_ALG_RABENSEIFNER)).decode() == "rabenseifner"


def rab(total: int, **overrides):
    return plan(total, **{"rabenseifner_bytes": RABENSEIFNER_BYTES, **overrides}).algorithm


def test_rabenseifner_between_the_latency_and_its_own_threshold():
    assert rab(512 * KIB // 4 - 1) == lib.MLC_ALG_RECURSIVE_DOUBLING
    assert rab(512 * KIB // 4) == lib.MLC_ALG_RABENSEIFNER
    assert rab(RABENSEIFNER_BYTES // 4 - 1) == lib.MLC_ALG_RABENSEIFNER
    assert rab(RABENSEIFNER_BYTES // 4) == lib.MLC_ALG_RING
    assert rab(RABENSEIFNER_BYTES // 8, dtype=lib.MLC_FLOAT64) == lib.MLC_ALG_RING  # bytes count
    # It is cut and placed like the ring: caller's thread up to inline_bytes, then lanes.
    p = plan(MIB // 4, rabenseifner_bytes=RABENSEIFNER_BYTES)
    q = plan(MIB // 4, algorithm=lib.MLC_ALG_RING)
    assert (p.on_caller, p.lanes, p.seg_elems, p.nseg) == (
        q.on_caller,
        q.lanes,
        q.seg_elems,
        q.nseg,
    )


@pytest.mark.parametrize("nranks", [1, 2, 3, 5, 6, 7, 12])
def test_rabenseifner_only_at_power_of_two_rank_counts_from_four(nranks):
    assert rab(MIB // 4, nranks=nranks) == lib.MLC_ALG_RING


@pytest.mark.parametrize("nranks", [4, 8, 16, 64])
def test_rabenseifner_at_power_of_two_rank_counts(nranks):
    assert rab(MIB // 4, nranks=nranks) == lib.MLC_ALG_RABENSEIFNER


def test_at_few_ranks_rabenseifner_never_for_groups_compressed_values_or_a_chosen_algorithm():
    assert rab(MIB // 4, is_group=1, blocking=0) == lib.MLC_ALG_RING
    assert rab(MIB // 4, algorithm=lib.MLC_ALG_RING) == lib.MLC_ALG_RING
    assert rab(MIB // 4, rabenseifner_bytes=0) == lib.MLC_ALG_RING
    for compression in (lib.MLC_COMPRESSION_BF16, lib.MLC_COMPRESSION_FP16):
        p = plan(MIB // 4, rabenseifner_bytes=RABENSEIFNER_BYTES, compression=compression)
        assert (p.algorithm, p.compression) == (lib.MLC_ALG_RING, compression)
        # Only float32 is compressed: other dtypes keep Rabenseifner, uncompressed.
        p = plan(MIB // 8, rabenseifner_bytes=RABENSEIFNER_BYTES, compression=compression,
                 dtype=lib.MLC_FLOAT64)  # fmt: skip
        assert (p.algorithm, p.compression) == (lib.MLC_ALG_RABENSEIFNER, lib.MLC_COMPRESSION_NONE)
    # A chosen Rabenseifner carries the team's 16-bit values, as the ring does.
    forced = plan(
        MIB // 4, algorithm=lib.MLC_ALG_RABENSEIFNER, compression=lib.MLC_COMPRESSION_BF16
    )
    assert (forced.algorithm, forced.compression) == (
        lib.MLC_ALG_RABENSEIFNER,
        lib.MLC_COMPRESSION_BF16,
    )


@pytest.mark.parametrize("compression", [lib.MLC_COMPRESSION_BF16, lib.MLC_COMPRESSION_FP16])
def test_sixteen_bits_on_the_wire_for_float32_sums_on_the_ring_and_rabenseifner(compression):
    ring = MIB // 4  # above the latency threshold: the ring
    assert plan(ring, compression=compression).compression == compression
    assert plan(ring, compression=compression, blocking=0, ntensors=3).compression == compression
    assert plan(10, is_group=1, blocking=0, compression=compression).compression == compression
    assert plan(ring).compression == lib.MLC_COMPRESSION_NONE  # the team did not ask
    # Other dtypes keep their own: float64's precision, exact integers, halves already.
    for dtype in (lib.MLC_FLOAT64, lib.MLC_INT32, lib.MLC_INT64, lib.MLC_FLOAT16, lib.MLC_BFLOAT16):
        assert plan(ring, dtype=dtype, compression=compression).compression == 0
    # The latency paths (direct, recursive doubling) and a single rank send float32 or nothing.
    assert plan(1024, compression=compression).compression == 0  # direct
    assert plan(512 * KIB // 4 - 1, compression=compression).compression == 0  # rec. doubling
    forced = plan(ring, algorithm=lib.MLC_ALG_RECURSIVE_DOUBLING, compression=compression)
    assert forced.compression == 0
    assert plan(ring, nranks=1, compression=compression).compression == 0
    assert plan(ring, kind=lib.MLC_KIND_BROADCAST, compression=compression).compression == 0
    # What is compressed does not change how the request is cut.
    assert plan(ring, compression=compression).nseg == plan(ring).nseg


def test_compression_names():
    names = [ffi.string(lib.mlc_compression_name(c)).decode() for c in range(4)]
    assert names == ["none", "bf16", "fp16", "unknown"]


# Above MLC_RING_LATENCY_RANKS (64), where TEAM's 256 KiB chunks make blocks under
# MLC_RING_MIN_BLOCK_BYTES (16 KiB).
@pytest.mark.parametrize("nranks", [65, 100, 1000, 1024, 4096])
def test_large_rank_counts_take_rabenseifner_where_the_rings_blocks_are_small(nranks):
    at = dict(nranks=nranks)
    assert plan(MIB // 4, **at).algorithm == lib.MLC_ALG_RABENSEIFNER  # any rank count
    group = plan(10, is_group=1, blocking=0, ntensors=3, in_place=0, **at)
    assert (group.algorithm, group.lanes, group.on_caller) == (lib.MLC_ALG_RABENSEIFNER, 2, 0)
    assert plan(512 * KIB // 4 - 1, **at).algorithm == lib.MLC_ALG_RECURSIVE_DOUBLING
    assert plan(1024, **at).algorithm == lib.MLC_ALG_DIRECT
    assert plan(MIB // 4, algorithm=lib.MLC_ALG_RING, **at).algorithm == lib.MLC_ALG_RING
    # 16-bit wire values take Rabenseifner too (sums and averages; other ops send float32).
    for compression in (lib.MLC_COMPRESSION_BF16, lib.MLC_COMPRESSION_FP16):
        p = plan(MIB // 4, compression=compression, **at)
        assert (p.algorithm, p.compression) == (lib.MLC_ALG_RABENSEIFNER, compression)
        p = plan(10, is_group=1, blocking=0, ntensors=3, compression=compression, **at)
        assert (p.algorithm, p.compression) == (lib.MLC_ALG_RABENSEIFNER, compression)
        p = plan(MIB // 4, compression=compression, op=lib.MLC_OP_MAX, **at)
        assert (p.algorithm, p.compression) == (lib.MLC_ALG_RABENSEIFNER, lib.MLC_COMPRESSION_NONE)
    # The segments are cut as the ring's.
    q = plan(MIB // 4, algorithm=lib.MLC_ALG_RING, **at)
    assert (plan(MIB // 4, **at).seg_elems, plan(MIB // 4, **at).nseg) == (q.seg_elems, q.nseg)


@pytest.mark.parametrize("nranks", [3, 5, 12, 16, 17, 64])
def test_the_ring_up_to_64_ranks_or_while_its_blocks_fill_a_step(nranks):
    assert plan(MIB // 4, nranks=nranks).algorithm == lib.MLC_ALG_RING
    assert plan(10, is_group=1, blocking=0, nranks=nranks).algorithm == lib.MLC_ALG_RING
    assert plan(10, is_group=1, blocking=0, nranks=nranks, chunk_bytes=256).algorithm == (
        lib.MLC_ALG_RING
    )
    # Larger chunks keep the ring at more ranks: 8 MiB chunks up to 512.
    big = dict(chunk_bytes=8 * MIB, is_group=1, blocking=0)
    assert plan(10, nranks=512, **big).algorithm == lib.MLC_ALG_RING
    assert plan(10, nranks=513, **big).algorithm == lib.MLC_ALG_RABENSEIFNER


@pytest.mark.parametrize(
    "ntensors, total, inline, want",
    [
        (1, 256 * KIB, 4 * MIB, 1),  # one small tensor: its submit reduces it
        (1, 1 * MIB // 4, 4 * MIB, 1),  # float32 elements: exactly submit_bytes
        (1, 1 * MIB // 4 + 1, 4 * MIB, 0),  # one element more: a keyed group
        (2, 1000, 4 * MIB, 0),  # several tensors overlap with backprop: a group
        (1, 1000, 1000, 0),  # over the inline threshold
    ],
)
def test_a_group_of_one_small_tensor_is_reduced_by_its_submit(ntensors, total, inline, want):
    p = plan(total, ntensors=ntensors, is_group=1, blocking=0, in_place=0, inline_bytes=inline)
    assert p.by_submit == want
    assert plan(total, ntensors=ntensors).by_submit == 0  # not a group: nothing to decide
