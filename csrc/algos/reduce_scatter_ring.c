/* Ring reduce-scatter over a batch of segments, the first half of the ring
 * allreduce (allreduce_ring.c).
 *
 * Steps, n ranks, each segment cut into n balanced blocks: at step s = 0..n-2
 * rank r sends block (r-s) to rank r+1 and receives block (r-s-1) from rank r-1,
 * adding it to its own copy. After n-1 steps rank r holds the total of block
 * (r+1). Bytes on the wire per rank: (n-1)/n * N * elem_size each way; with
 * 16-bit values on the wire (compression, float32 only) (n-1)/n * N * 2: half.
 * Pipelining: every segment's receive and send of a step are posted before any
 * is reduced, so one segment's transfer proceeds while another's block is added.
 * Out of place: step 0 sends from the input, and each block received is added to
 * the input's block into the output, so the input is read once and never copied
 * (block r is the one never received: the allgather fills it). For an average
 * the last step divides the block's total as it adds it, in cache.
 * Compression: the block a rank sends (its float32 partial sum) is rounded to
 * 16 bits into the segment's wire image (ring_blocks.h) and sent from there; the
 * block received lands in the wire image and is added in float32. The owner of a
 * block ends with its float32 total, unrounded: the allgather rounds it.
 * Determinism: each block is summed in one fixed order, around the ring, and
 * rounded at the same hops on every run. */
#include "algo.h"
#include "ring_blocks.h"

/* Post step s's receive and send of segment d; *received: the receive is posted. */
static int post(mlc_tp *tp, const mlc_algo_call *c, int s, int d, mlc_tp_req *recv,
                mlc_tp_req *send, int *received) {
    const int n = tp->size, r = tp->rank;
    const mlc_segment *seg = &c->segs[d];
    const int rb = mlc_ring_rs_recv_block(r, n, s), sb = mlc_ring_rs_send_block(r, n, s);
    const char *from = s == 0 && seg->input ? seg->input : seg->data;
    int64_t off, len, count;
    int rc;
    if (mlc_ring_wired(c)) {
        char *in = mlc_ring_wire_block(tp, c, d, rb, &len, &count);
        if ((rc = mlc_tp_irecv(tp, in, len, (r + n - 1) % n, seg->tag, recv))) return rc;
        *received = 1;
        char *out = mlc_ring_wire_block(tp, c, d, sb, &len, &count);
        mlc_ring_block(tp, c, d, sb, &off, &count);
        mlc_wire_pack(out, (const float *)(from + off), len / 2, c->compression);
        return mlc_tp_isend(tp, out, len, (r + 1) % n, seg->tag, send);
    }
    mlc_ring_block(tp, c, d, rb, &off, &len);
    if ((rc = mlc_tp_irecv(tp, c->scratch + d * mlc_ring_slot_bytes(tp, c), len, (r + n - 1) % n,
                           seg->tag, recv)))
        return rc;
    *received = 1;
    mlc_ring_block(tp, c, d, sb, &off, &len);
    return mlc_tp_isend(tp, from + off, len, (r + 1) % n, seg->tag, send);
}

/* Add step s's block of segment d, received, to this rank's own. */
static void reduce(const mlc_tp *tp, const mlc_algo_call *c, int s, int d) {
    const int n = tp->size, rb = mlc_ring_rs_recv_block(tp->rank, n, s);
    const mlc_segment *seg = &c->segs[d];
    const int last = s == n - 2 && c->op == MLC_OP_AVERAGE; /* the block's total: divide it now */
    int64_t off, len, count;
    mlc_ring_block(tp, c, d, rb, &off, &len);
    const char *mine = (seg->input ? seg->input : seg->data) + off;
    if (mlc_ring_wired(c)) {
        const char *in = mlc_ring_wire_block(tp, c, d, rb, &len, &count);
        float *out = (float *)(seg->data + off);
        if (last) mlc_wire_sum_average_to(out, (const float *)mine, in, count, c->compression, n);
        else mlc_wire_sum_to(out, (const float *)mine, in, count, c->compression);
        return;
    }
    const char *in = c->scratch + d * mlc_ring_slot_bytes(tp, c);
    if (last) mlc_reduce_sum_average_to(seg->data + off, mine, in, len / c->elem_size, c->dtype, n);
    else mlc_reduce_op_to(seg->data + off, mine, in, len / c->elem_size, c->dtype, c->op);
}

int mlc_reduce_scatter_ring(mlc_tp *tp, const mlc_algo_call *c) {
    mlc_tp_req reqs[2 * MLC_RING_MAX_BATCH];
    int rc, idx;

    for (int s = 0; s < tp->size - 1; s++) {
        for (int d = 0; d < c->nseg; d++) {
            int received = 0;
            if ((rc = post(tp, c, s, d, &reqs[d], &reqs[c->nseg + d], &received)))
                return mlc_ring_fail(tp, reqs, d + received, c->nseg, d, rc);
        }
        for (int k = 0; k < c->nseg; k++) {
            if ((rc = mlc_tp_waitany(tp, c->nseg, reqs, &idx)))
                return mlc_ring_fail(tp, reqs, c->nseg, c->nseg, c->nseg, rc);
            reduce(tp, c, s, idx);
        }
        if ((rc = mlc_tp_waitall(tp, c->nseg, reqs + c->nseg))) return rc;
    }
    return MLC_OK;
}
