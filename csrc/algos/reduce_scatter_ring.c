/* Ring reduce-scatter over a batch of segments, the first half of the ring
 * allreduce (allreduce_ring.c).
 *
 * Steps, n ranks, each segment cut into n balanced blocks: at step s = 0..n-2
 * rank r sends block (r-s) to rank r+1 and receives block (r-s-1) from rank r-1,
 * adding it to its own copy. After n-1 steps rank r holds the total of block
 * (r+1). Bytes on the wire per rank: (n-1)/n * N each way.
 * Pipelining: every segment's receive and send of a step are posted before any
 * is reduced, so one segment's transfer proceeds while another's block is added.
 * Out of place: step 0 sends from the input, and each block received is added to
 * the input's block into the output, so the input is read once and never copied
 * (block r is the one never received: the allgather fills it). For an average
 * the last step divides the block's total as it adds it, in cache.
 * Determinism: each block is summed in one fixed order, around the ring. */
#include "algo.h"
#include "ring_blocks.h"

int mlc_reduce_scatter_ring(mlc_tp *tp, const mlc_algo_call *c) {
    mlc_tp_req reqs[2 * MLC_RING_MAX_BATCH];
    const int n = tp->size, r = tp->rank;
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    const int64_t slot = mlc_ring_slot_bytes(tp, c);
    int64_t off, len;
    int rc, idx;

    for (int s = 0; s < n - 1; s++) {
        for (int d = 0; d < c->nseg; d++) {
            const mlc_segment *seg = &c->segs[d];
            mlc_ring_block(tp, c, d, mlc_ring_rs_recv_block(r, n, s), &off, &len);
            if ((rc = mlc_tp_irecv(tp, c->scratch + d * slot, len, left, seg->tag, &reqs[d])))
                return mlc_ring_fail(tp, reqs, d, c->nseg, d, rc);
            mlc_ring_block(tp, c, d, mlc_ring_rs_send_block(r, n, s), &off, &len);
            const char *from = s == 0 && seg->input ? seg->input : seg->data;
            rc = mlc_tp_isend(tp, from + off, len, right, seg->tag, &reqs[c->nseg + d]);
            if (rc) return mlc_ring_fail(tp, reqs, d + 1, c->nseg, d, rc);
        }
        for (int k = 0; k < c->nseg; k++) {
            if ((rc = mlc_tp_waitany(tp, c->nseg, reqs, &idx)))
                return mlc_ring_fail(tp, reqs, c->nseg, c->nseg, c->nseg, rc);
            const mlc_segment *seg = &c->segs[idx];
            mlc_ring_block(tp, c, idx, mlc_ring_rs_recv_block(r, n, s), &off, &len);
            const char *mine = (seg->input ? seg->input : seg->data) + off;
            if (s == n - 2 && c->op == MLC_OP_AVERAGE) /* the block's total: divide it now */
                mlc_reduce_sum_average_to(seg->data + off, mine, c->scratch + idx * slot,
                                          len / c->elem_size, c->dtype, n);
            else
                mlc_reduce_sum_to(seg->data + off, mine, c->scratch + idx * slot,
                                  len / c->elem_size, c->dtype);
        }
        if ((rc = mlc_tp_waitall(tp, c->nseg, reqs + c->nseg))) return rc;
    }
    return MLC_OK;
}
