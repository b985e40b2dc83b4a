/* Rabenseifner allreduce: reduce-scatter by recursive halving, then allgather by
 * recursive doubling, over a batch of segments.
 *
 * Steps, p = n ranks a power of two, each segment cut into p balanced blocks,
 * on virtual ranks v = the bit reversal of the rank over log2(p) bits:
 *   halving, d = p/2, p/4, .., 1: rank v holds a range of 2d blocks (all p at
 *     first); it keeps the lower half when bit d of v is 0, else the upper half,
 *     sends the other half to v XOR d and adds the partner's copy of its half.
 *     After log2(p) steps rank v holds the total of block v;
 *   doubling, d = 1, 2, .., p/2: rank v sends the d blocks it holds to v XOR d
 *     and receives the partner's d blocks straight into place.
 * Why virtual ranks: the first halving step and the last doubling step each move
 * half the segment, the next a quarter, and so on. With the bits reversed the
 * partner of those largest steps is the neighbouring rank (v XOR p/2 is rank XOR 1),
 * and only the smallest steps (1/p of the segment) go to the farthest ranks: with
 * ranks numbered by node, the bulk stays under one switch or router, and the links
 * between groups of a dragonfly or the levels of a fat tree carry the least.
 * Bytes on the wire per rank: (p-1)/p * N * elem_size each way per half, the
 * ring's 2(p-1)/p * N in all, but in 2 log2(p) message latencies where the ring
 * takes 2(p-1): at 4 ranks and a few MiB that is the difference.
 * Determinism: at every halving step each block is added by exactly one rank
 * (the one keeping it), in an order fixed by the ranks' bits, so block b's total
 * is computed once, by virtual rank b, the same way on every run; the allgather copies
 * it, never recomputes it, so every rank ends with that rank's bits.
 * Not a power of two (forced, or the plan's choice at large rank counts): the
 * ranks r >= p (p the largest power of two below n) fold their whole input into
 * r - p first and receive the result at the end, as recursive doubling does.
 * Out of place: the first halving step sends from the input and adds the input's
 * kept half into the output; nothing is copied. An average divides each block's
 * total as the last halving step adds it.
 * Compression (16-bit values on the wire, float32 only): each segment has a wire
 * image in scratch, all its p blocks at 16 bits, as the ring's (ring_blocks.h). A
 * halving step packs the half it gives (its float32 partial sums) into the image
 * and sends it from there, and receives the partner's copy of the half it keeps
 * into the image, to be added in float32: the halves are disjoint, so one image
 * serves both. The owner of a block then rounds its total into the image and keeps
 * exactly that value; the doubling steps move 16-bit blocks between images, and
 * each rank widens what it received. A fold sends the folded rank's input packed,
 * and the finished image back. Bytes on the wire: half of the above; a partial sum
 * is rounded at each of the log2(p) halving hops (the ring's: n-1 hops).
 * float16 overflow: every rank < p sees every block's 16 bits (its own when
 * rounding it, the others when widening them) and a folded rank the whole image,
 * so every rank finds the same NaN/Inf and fails the call with MLC_ERR_OVERFLOW.
 * Scratch: half of the largest segment per segment of the batch (the first
 * halving step's receive), or one whole segment for a fold; compressed, a wire
 * image of the largest segment per segment of the batch. */
#include <string.h>

#include "algo.h"
#include "ring_blocks.h" /* the wire image per segment, as the ring lays it out */

#define MAX_BATCH 8

/* Byte offset and length of blocks [b, b+nb) of a segment of count elements. */
static void blocks(int64_t count, int p, int b, int nb, int es, int64_t *off, int64_t *len) {
    int64_t o0, l0, o1, l1;
    mlc_block_range(count, p, b, &o0, &l0);
    mlc_block_range(count, p, b + nb - 1, &o1, &l1);
    *off = o0 * es;
    *len = (o1 + l1 - o0) * es;
}

/* Scratch per segment: the largest half of any segment of the batch. */
static int64_t slot_bytes(const mlc_algo_call *c, int p) {
    int64_t max_count = 0;
    for (int d = 0; d < c->nseg; d++)
        if (c->segs[d].count > max_count) max_count = c->segs[d].count;
    return (max_count + p - 1) / p * (p / 2) * c->elem_size;
}

/* Blocks [b, b+nb) of segment s in its wire image: the address, bytes and elements. */
static char *image(const mlc_algo_call *c, const mlc_segment *seg, int s, int p, int b, int nb,
                   int64_t *bytes, int64_t *count) {
    int64_t off, len;
    blocks(seg->count, p, b, nb, 1, &off, &len);
    const int ws = mlc_wire_size(c->compression);
    *count = len;
    *bytes = len * ws;
    return c->scratch + s * mlc_ring_wire_slot_bytes(c) + off * ws;
}

static int fail(mlc_tp *tp, mlc_tp_req *reqs, int posted, int rc) {
    mlc_tp_abandon(tp, posted, reqs);
    return rc;
}

/* The bit reversal of r over log2(p) bits (p a power of two): its own inverse, so
 * it maps ranks to virtual ranks and back. */
static int reversed_bits(int r, int p) {
    int v = 0;
    for (int bit = 1; bit < p; bit <<= 1) v = (v << 1) | ((r & bit) != 0);
    return v;
}

/* One halving step, distance d between virtual ranks, every segment; *lo: the first
 * block this rank holds, moved to the half it keeps. */
static int halve(mlc_tp *tp, const mlc_algo_call *c, const mlc_segment *segs, int p, int d, int *lo) {
    mlc_tp_req reqs[2 * MAX_BATCH];
    const int r = reversed_bits(tp->rank, p), partner = reversed_bits(r ^ d, p), es = c->elem_size;
    const int keep = (r & d) ? *lo + d : *lo, give = (r & d) ? *lo : *lo + d;
    const int first = d == p / 2, last = d == 1 && c->op == MLC_OP_AVERAGE;
    const int64_t slot = slot_bytes(c, p);
    int64_t off, len, count;
    int rc, idx, posted = 0;

    for (int s = 0; s < c->nseg; s++) {
        const mlc_segment *seg = &segs[s];
        char *in = c->scratch + s * slot;
        blocks(seg->count, p, keep, d, es, &off, &len);
        if (mlc_ring_wired(c)) in = image(c, seg, s, p, keep, d, &len, &count);
        if ((rc = mlc_tp_irecv(tp, in, len, partner, seg->tag, &reqs[s]))) return fail(tp, reqs, posted, rc);
        posted++;
    }
    for (int s = 0; s < c->nseg; s++) {
        const mlc_segment *seg = &segs[s];
        const char *from = first && seg->input ? seg->input : seg->data;
        blocks(seg->count, p, give, d, es, &off, &len);
        from += off;
        if (mlc_ring_wired(c)) {
            char *out = image(c, seg, s, p, give, d, &len, &count);
            mlc_wire_pack(out, (const float *)from, count, c->compression);
            from = out;
        }
        if ((rc = mlc_tp_isend(tp, from, len, partner, seg->tag, &reqs[c->nseg + s])))
            return fail(tp, reqs, posted, rc);
        posted++;
    }
    /* Add each segment's half as it lands, while the others are still on the wire. */
    for (int k = 0; k < c->nseg; k++) {
        if ((rc = mlc_tp_waitany(tp, c->nseg, reqs, &idx))) return fail(tp, reqs, posted, rc);
        const mlc_segment *seg = &segs[idx];
        const char *mine = first && seg->input ? seg->input : seg->data;
        blocks(seg->count, p, keep, d, es, &off, &len);
        if (mlc_ring_wired(c)) {
            const char *in = image(c, seg, idx, p, keep, d, &len, &count);
            float *out = (float *)(seg->data + off);
            if (last) mlc_wire_sum_average_to(out, (const float *)(mine + off), in, count, c->compression, tp->size);
            else mlc_wire_sum_to(out, (const float *)(mine + off), in, count, c->compression);
            continue;
        }
        const char *in = c->scratch + idx * slot;
        if (last) mlc_reduce_sum_average_to(seg->data + off, mine + off, in, len / es, c->dtype, tp->size);
        else mlc_reduce_op_to(seg->data + off, mine + off, in, len / es, c->dtype, c->op);
    }
    if ((rc = mlc_tp_waitall(tp, c->nseg, reqs + c->nseg))) return fail(tp, reqs + c->nseg, c->nseg, rc);
    *lo = keep;
    return MLC_OK;
}

/* One doubling step, distance d between virtual ranks: this rank's d blocks out, the
 * partner's in (compressed: between wire images, the received blocks widened into
 * place; *special |= 1 when one is NaN/Inf). */
static int double_up(mlc_tp *tp, const mlc_algo_call *c, const mlc_segment *segs, int p, int d, int *special) {
    mlc_tp_req reqs[2 * MAX_BATCH];
    const int r = reversed_bits(tp->rank, p), partner = reversed_bits(r ^ d, p), es = c->elem_size;
    const int mine = r & ~(d - 1), theirs = (r ^ d) & ~(d - 1);
    int64_t off, len, count;
    int rc, posted = 0;

    for (int s = 0; s < c->nseg; s++) {
        blocks(segs[s].count, p, theirs, d, es, &off, &len);
        char *in = mlc_ring_wired(c) ? image(c, &segs[s], s, p, theirs, d, &len, &count) : segs[s].data + off;
        if ((rc = mlc_tp_irecv(tp, in, len, partner, segs[s].tag, &reqs[posted]))) return fail(tp, reqs, posted, rc);
        posted++;
        blocks(segs[s].count, p, mine, d, es, &off, &len);
        char *out = mlc_ring_wired(c) ? image(c, &segs[s], s, p, mine, d, &len, &count) : segs[s].data + off;
        if ((rc = mlc_tp_isend(tp, out, len, partner, segs[s].tag, &reqs[posted]))) return fail(tp, reqs, posted, rc);
        posted++;
    }
    if ((rc = mlc_tp_waitall(tp, posted, reqs))) return rc;
    for (int s = 0; mlc_ring_wired(c) && s < c->nseg; s++) {
        blocks(segs[s].count, p, theirs, d, es, &off, &len);
        const char *in = image(c, &segs[s], s, p, theirs, d, &len, &count);
        *special |= mlc_wire_unpack((float *)(segs[s].data + off), in, count, c->compression);
    }
    return MLC_OK;
}

/* Ranks r >= p hand their input to r - p, which adds it in; afterwards the
 * folded segments are in place (their input consumed). Compressed, the input
 * travels packed through the wire images. */
static int fold_in(mlc_tp *tp, const mlc_algo_call *c, mlc_segment *segs, int p) {
    const int r = tp->rank, partner = mlc_rd_fold_partner(r, tp->size);
    int64_t bytes, count;
    int rc;
    for (int s = 0; s < c->nseg && partner >= 0; s++) {
        const char *mine = segs[s].input ? segs[s].input : segs[s].data;
        char *buf = c->scratch;
        bytes = segs[s].count * c->elem_size;
        if (mlc_ring_wired(c)) buf = image(c, &segs[s], s, p, 0, p, &bytes, &count);
        if (r >= p) {
            if (mlc_ring_wired(c)) mlc_wire_pack(buf, (const float *)mine, count, c->compression);
            if ((rc = mlc_tp_send(tp, mlc_ring_wired(c) ? buf : mine, bytes, partner, segs[s].tag))) return rc;
            continue;
        }
        if ((rc = mlc_tp_recv(tp, buf, bytes, partner, segs[s].tag))) return rc;
        if (mlc_ring_wired(c)) mlc_wire_sum_to((float *)segs[s].data, (const float *)mine, buf, count, c->compression);
        else mlc_reduce_op_to(segs[s].data, mine, buf, segs[s].count, c->dtype, c->op);
        segs[s].input = NULL;
    }
    return MLC_OK;
}

/* The totals back to the folded ranks (already averaged); compressed, the finished
 * wire image, widened by the folded rank (*special |= 1 on a NaN/Inf). */
static int fold_out(mlc_tp *tp, const mlc_algo_call *c, const mlc_segment *segs, int p, int *special) {
    const int r = tp->rank, partner = mlc_rd_fold_partner(r, tp->size);
    int64_t bytes, count;
    int rc;
    for (int s = 0; s < c->nseg && partner >= 0; s++) {
        char *buf = segs[s].data;
        bytes = segs[s].count * c->elem_size;
        if (mlc_ring_wired(c)) buf = image(c, &segs[s], s, p, 0, p, &bytes, &count);
        rc = r >= p ? mlc_tp_recv(tp, buf, bytes, partner, segs[s].tag)
                    : mlc_tp_send(tp, buf, bytes, partner, segs[s].tag);
        if (rc) return rc;
        if (mlc_ring_wired(c) && r >= p) *special |= mlc_wire_unpack((float *)segs[s].data, buf, count, c->compression);
    }
    return MLC_OK;
}

/* Compressed: this rank's block, its total, rounded to 16 bits into the wire image
 * and kept as that value; 1 when one is NaN/Inf. */
static int round_own(const mlc_algo_call *c, const mlc_segment *segs, int p, int lo) {
    int64_t off, len, count;
    int special = 0;
    for (int s = 0; s < c->nseg; s++) {
        blocks(segs[s].count, p, lo, 1, c->elem_size, &off, &len);
        char *wire = image(c, &segs[s], s, p, lo, 1, &len, &count);
        special |= mlc_wire_round((float *)(segs[s].data + off), wire, count, c->compression);
    }
    return special;
}

int mlc_allreduce_rabenseifner(mlc_tp *tp, const mlc_algo_call *c) {
    const int n = tp->size, p = mlc_rd_pow2_floor(n);
    mlc_segment segs[MAX_BATCH];
    int rc, lo = 0;

    if (c->nseg > MAX_BATCH || (mlc_ring_wired(c) && c->dtype != MLC_FLOAT32)) return MLC_ERR_ARG;
    if (n == 1) { /* nothing to exchange: an out-of-place input is the result */
        for (int s = 0; s < c->nseg; s++) mlc_segment_copy_input(&c->segs[s], c->elem_size);
        return MLC_OK;
    }
    int64_t need = c->nseg * (mlc_ring_wired(c) ? mlc_ring_wire_slot_bytes(c) : slot_bytes(c, p));
    for (int s = 0; p < n && !mlc_ring_wired(c) && s < c->nseg; s++)
        if (c->segs[s].count * c->elem_size > need) need = c->segs[s].count * c->elem_size;
    if (need > c->scratch_bytes) return MLC_ERR_ARG;
    memcpy(segs, c->segs, c->nseg * sizeof *segs);

    int special = 0;
    if ((rc = fold_in(tp, c, segs, p))) return rc;
    if (tp->rank < p) {
        for (int d = p / 2; d >= 1; d /= 2)
            if ((rc = halve(tp, c, segs, p, d, &lo))) return rc;
        if (mlc_ring_wired(c)) special = round_own(c, segs, p, lo);
        for (int d = 1; d < p; d *= 2)
            if ((rc = double_up(tp, c, segs, p, d, &special))) return rc;
    }
    if ((rc = fold_out(tp, c, segs, p, &special))) return rc;
    return special && c->compression == MLC_COMPRESSION_FP16 ? MLC_ERR_OVERFLOW : MLC_OK;
}
