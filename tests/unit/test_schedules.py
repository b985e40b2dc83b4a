"""Schedules are pure functions of (rank, size, step, counts): simulate them
symbolically, without MPI, for 1..16 ranks and awkward counts, and check that
every element ends up with every rank's contribution exactly once."""

from __future__ import annotations

import functools
import itertools
import random

import pytest
from core_internals import ffi, lib

SIZES = range(1, 17)


def counts_for(n: int) -> list[int]:
    return sorted({0, 1, max(n - 1, 0), n, n + 1, 7, 1001, 3 * n + 2})


def block_range(count: int, nblocks: int, b: int) -> tuple[int, int]:
    off, length = ffi.new("int64_t *"), ffi.new("int64_t *")
    lib.mlc_block_range(count, nblocks, b, off, length)
    return off[0], length[0]


@pytest.mark.parametrize("n", SIZES)
def test_block_range_partitions_exactly_and_evenly(n):
    for count in counts_for(n):
        pos, lengths = 0, []
        for b in range(n):
            off, length = block_range(count, n, b)
            assert off == pos, (count, n, b)
            pos += length
            lengths.append(length)
        assert pos == count
        assert max(lengths) - min(lengths) <= 1


def simulate_ring(n: int, count: int) -> list[list[frozenset]]:
    """Each element holds the set of ranks summed into it; returns every rank's buffer."""
    bufs = [[frozenset([r])] * count for r in range(n)]

    def block(b):
        off, length = block_range(count, n, b)
        return range(off, off + length)

    for s in range(n - 1):
        sent = {}
        for r in range(n):
            b = lib.mlc_ring_rs_send_block(r, n, s)
            sent[(r + 1) % n] = (b, [bufs[r][i] for i in block(b)])
        for r in range(n):
            b, data = sent[r]
            assert lib.mlc_ring_rs_recv_block(r, n, s) == b, "receiver expects another block"
            for i, contrib in zip(block(b), data):
                assert not (bufs[r][i] & contrib), "a contribution would be added twice"
                bufs[r][i] = bufs[r][i] | contrib
    everyone = frozenset(range(n))
    for r in range(n):
        owned = lib.mlc_ring_ag_send_block(r, n, 0)
        assert all(bufs[r][i] == everyone for i in block(owned)), "owner lacks the full sum"
    for s in range(n - 1):
        sent = {}
        for r in range(n):
            b = lib.mlc_ring_ag_send_block(r, n, s)
            sent[(r + 1) % n] = (b, [bufs[r][i] for i in block(b)])
        for r in range(n):
            b, data = sent[r]
            assert lib.mlc_ring_ag_recv_block(r, n, s) == b
            for i, contrib in zip(block(b), data):
                bufs[r][i] = contrib
    return bufs


@pytest.mark.parametrize("n", SIZES)
def test_ring_gives_every_rank_the_full_sum(n):
    for count in counts_for(n):
        everyone = frozenset(range(n))
        for buf in simulate_ring(n, count):
            assert buf == [everyone] * count


@pytest.mark.parametrize("n", SIZES)
def test_recursive_doubling_with_fold(n):
    p2 = lib.mlc_rd_pow2_floor(n)
    assert p2 <= n < 2 * p2 and p2 & (p2 - 1) == 0
    held = [frozenset([r]) for r in range(n)]
    # fold: extra ranks hand their data to a partner below p2
    for r in range(p2, n):
        partner = lib.mlc_rd_fold_partner(r, n)
        assert lib.mlc_rd_fold_partner(partner, n) == r
        held[partner] |= held[r]
    for r in range(n - p2, p2):
        assert lib.mlc_rd_fold_partner(r, n) == -1
    for k in range(lib.mlc_rd_nsteps(n)):
        nxt = list(held)
        for r in range(p2):
            partner = lib.mlc_rd_partner(r, n, k)
            assert lib.mlc_rd_partner(partner, n, k) == r
            assert not (held[r] & held[partner]), "overlapping partial sums"
            nxt[r] = held[r] | held[partner]
        held = nxt
    for r in range(p2, n):
        assert lib.mlc_rd_partner(r, n, 0) == -1
        held[r] = held[lib.mlc_rd_fold_partner(r, n)]
    assert held == [frozenset(range(n))] * n


@pytest.mark.parametrize("n", SIZES)
def test_binomial_tree_reaches_every_rank_once(n):
    children = ffi.new("int[64]")
    for root in range(n):
        assert lib.mlc_binomial_parent(root, root, n) == -1
        has = {root}
        frontier = [root]
        while frontier:
            r = frontier.pop(0)
            k = lib.mlc_binomial_children(r, root, n, children, 64)
            for c in list(children)[:k]:
                assert lib.mlc_binomial_parent(c, root, n) == r
                assert c not in has, "a rank would receive twice"
                has.add(c)
                frontier.append(c)
        assert has == set(range(n))


@pytest.mark.parametrize("nthreads", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("extra_slots", [0, 1, 3, 50])
def test_segment_owner_gives_each_slot_to_one_thread(nthreads, extra_slots):
    window = 2 * nthreads + extra_slots  # the team makes at least two slots per thread
    slot_owner = {}
    for g in range(5 * window + 3):
        owner = lib.mlc_segment_owner(g, window, nthreads)
        assert 0 <= owner < nthreads
        assert slot_owner.setdefault(g % window, owner) == owner
    mine = [
        [g for g in range(5 * window) if lib.mlc_segment_owner(g, window, nthreads) == t]
        for t in range(nthreads)
    ]
    for segs in mine:
        # a thread's ring batch (two consecutive segments of its own) never shares a slot
        assert all(a % window != b % window for a, b in zip(segs, segs[1:]))


@pytest.mark.parametrize("total", [0, 1, 7, 1000, 1 << 20, (1 << 26) + 3])
@pytest.mark.parametrize("nthreads", [1, 2, 4])
def test_segment_elems(total, nthreads):
    chunk, min_elems = 1 << 18, 1 << 13
    seg = lib.mlc_segment_elems(total, chunk, nthreads, 2, min_elems)
    assert 1 <= seg <= chunk
    nseg = lib.mlc_segment_count(total, seg)
    assert nseg * seg >= total and (nseg - 1) * seg < max(total, 1)
    if total >= chunk * nthreads * 2:
        assert seg == chunk
    elif total >= min_elems * nthreads * 2:
        assert nseg >= nthreads * 2 - 1  # every thread gets (nearly) a full batch
    assert lib.mlc_segment_count(total, 0) == 0


def aligned_starts(counts: list[int], seg: int) -> tuple[list[int], int]:
    tensors = ffi.new("mlc_tensor[]", max(len(counts), 1))
    for t, c in zip(tensors, counts):
        t.count = c
    starts = ffi.new("int64_t[]", len(counts) + 1)
    span = lib.mlc_segment_aligned_starts(tensors, len(counts), seg, starts)
    return list(starts), span


def test_aligned_starts_example():
    # 64 and more start on a multiple of 64; the rest follow the tensor before them.
    starts, span = aligned_starts([10, 64, 5, 130, 0, 64, 3], 64)
    assert starts == [0, 64, 128, 192, 322, 384, 448, 451]
    assert span == 451


@pytest.mark.parametrize("seg", [1, 7, 64, 1000])
def test_aligned_starts_segments_never_hold_a_gap_inside(seg):
    """Every tensor keeps its place in list order; a large one starts a segment; a gap
    only ever runs from a tensor's end to the next segment boundary, so a segment that
    ends in one is cut short there and no segment copies across one."""
    rng = random.Random(seg)
    for _ in range(200):
        counts = [rng.choice([0, 1, seg - 1, seg, seg + 1, 3 * seg + 2, rng.randrange(5 * seg)])
                  for _ in range(rng.randrange(1, 12))]  # fmt: skip
        starts, span = aligned_starts(counts, seg)
        end = 0
        for i, c in enumerate(counts):
            if c >= seg:
                assert starts[i] % seg == 0 and 0 <= starts[i] - end < seg, (counts, starts)
            else:
                assert starts[i] == end, (counts, starts)
            end = starts[i] + c
        assert starts[-1] == span == end
        covered = sorted((s, s + c) for s, c in zip(starts, counts) if c)
        for (_, gap_start), (next_start, _) in zip(covered, covered[1:]):
            assert next_start >= gap_start  # tensors never overlap
            if next_start > gap_start:  # a gap: no segment boundary strictly inside it
                assert next_start % seg == 0 and next_start - gap_start < seg


@pytest.mark.parametrize("n", SIZES)
def test_rows_share_is_horovods_split(n):
    """rows // n each, the first rows % n ranks one more, consecutive in rank order."""
    for rows in counts_for(n):
        shares = [lib.mlc_rows_share(rows, n, r) for r in range(n)]
        assert shares == [rows // n + (1 if r < rows % n else 0) for r in range(n)]
        assert [lib.mlc_rows_first(rows, n, r) for r in range(n)] == [
            sum(shares[:r]) for r in range(n)
        ]


@pytest.mark.parametrize("n", SIZES)
def test_ring_gatherv_gives_every_rank_every_block_once(n):
    held = [{r} for r in range(n)]
    for s in range(n - 1):
        sent = [lib.mlc_ring_gatherv_send_block(r, n, s) for r in range(n)]
        for r in range(n):
            assert sent[r] in held[r]  # forwards only what it holds
            got = lib.mlc_ring_gatherv_recv_block(r, n, s)
            assert got == sent[(r - 1) % n] and got not in held[r]
            held[r].add(got)
    assert all(h == set(range(n)) for h in held)


def gatherv_pieces(rank: int, n: int, send: bool, block_bytes: list[int], piece: int) -> list:
    cursor = ffi.new("mlc_gatherv_cursor *", lib.mlc_gatherv_start(rank, n, int(send)))
    sizes, out, pieces = ffi.new("int64_t[]", block_bytes), ffi.new("mlc_gatherv_piece *"), []
    while lib.mlc_gatherv_next(cursor, sizes, piece, out):
        pieces.append((out.block, out.offset, out.bytes))
    return pieces


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("piece", [1, 7, 64, 1 << 20])
def test_ring_gatherv_pieces(n, piece):
    """Each rank's send stream is its right neighbour's receive stream, piece for piece;
    a receive stream covers every other rank's block once, in order, in pieces of at most
    `piece` bytes that never cross a block; a send stream is the rank's own block, then
    the pieces it received, in the order received (so it forwards only what arrived)."""
    block_bytes = [(37 * r) % 101 * (r % 3 != 1) for r in range(n)]  # some blocks empty
    for r in range(n):
        sends = gatherv_pieces(r, n, True, block_bytes, piece)
        receives = gatherv_pieces(r, n, False, block_bytes, piece)
        assert sends == gatherv_pieces((r + 1) % n, n, False, block_bytes, piece)
        assert all(0 < b <= piece for _, _, b in sends + receives)
        for block in range(n):
            mine = [(o, b) for k, o, b in receives if k == block]
            want = block_bytes[block] if block != r else 0
            assert sum(b for _, b in mine) == want
            assert [o for o, _ in mine] == list(
                itertools.accumulate([0] + [b for _, b in mine][:-1])
            )[: len(mine)]
        own = [p for p in sends if p[0] == r]
        assert sends[: len(own)] == own and sum(b for _, _, b in own) == block_bytes[r]
        last = lib.mlc_ring_gatherv_recv_block(r, n, n - 2) if n > 1 else None
        assert sends[len(own) :] == [p for p in receives if p[0] != last]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_ring_scatterv_ends_with_each_rank_owning_its_block_complete(n, piece):
    """The reduce-scatter's streams (the allgather ring's of rank r-1,
    algos/reduce_scatterv_ring.c): a rank sends its input's pieces of block r-1, then
    forwards each piece it received with its own input added; each rank's partial of a
    piece is the set of ranks combined into it. Every rank ends with block r, every
    byte of it combined over all ranks."""
    block_bytes = [(37 * r) % 101 * (r % 3 != 1) + 1 for r in range(n)]
    sends = [gatherv_pieces((r - 1) % n, n, True, block_bytes, piece) for r in range(n)]
    receives = [gatherv_pieces((r - 1) % n, n, False, block_bytes, piece) for r in range(n)]
    lead = [len([p for p in sends[r] if p[0] == (r - 1) % n]) for r in range(n)]

    @functools.cache
    def sent(r: int, k: int) -> frozenset:
        """Contributors of rank r's k-th sent piece."""
        return frozenset({r}) if k < lead[r] else received(r, k - lead[r]) | {r}

    def received(r: int, k: int) -> frozenset:
        left = (r - 1) % n
        assert receives[r][k] == sends[left][k]  # the left neighbour's send stream
        return sent(left, k)

    for r in range(n):
        own = [(k, p) for k, p in enumerate(receives[r]) if p[0] == r]
        assert sum(b for _, (_, _, b) in own) == (block_bytes[r] if n > 1 else 0)
        for k, _ in own:
            assert received(r, k) | {r} == set(range(n))


@pytest.mark.parametrize("n", SIZES)
def test_pairwise_pairs_every_rank_with_every_other_once(n):
    for r in range(n):
        sent = [lib.mlc_pairwise_send_peer(r, n, s) for s in range(1, n)]
        got = [lib.mlc_pairwise_recv_peer(r, n, s) for s in range(1, n)]
        assert sorted(sent) == sorted(got) == [p for p in range(n) if p != r]
        for s in range(1, n):  # the peer it sends to receives from it at the same step
            assert lib.mlc_pairwise_recv_peer(sent[s - 1], n, s) == r
