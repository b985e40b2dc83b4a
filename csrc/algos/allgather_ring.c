/* Ring allgather over a batch of segments, the second half of the ring
 * allreduce (allreduce_ring.c): it starts where reduce_scatter_ring.c ends, each
 * rank r holding the final block (r+1) of every segment.
 *
 * Steps, n ranks: at step s = 0..n-2 rank r sends block (r+1-s) to rank r+1 and
 * receives block (r-s) from rank r-1 straight into place. Bytes on the wire per
 * rank: (n-1)/n * N each way. Blocks are copied, never recomputed, so every rank
 * ends with the bits of the rank that summed each block. */
#include "algo.h"
#include "ring_blocks.h"

int mlc_allgather_ring(mlc_tp *tp, const mlc_algo_call *c) {
    mlc_tp_req reqs[2 * MLC_RING_MAX_BATCH];
    const int n = tp->size, r = tp->rank;
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    int64_t off, len;
    int rc;

    for (int s = 0; s < n - 1; s++) {
        for (int d = 0; d < c->nseg; d++) {
            mlc_ring_block(tp, c, d, mlc_ring_ag_recv_block(r, n, s), &off, &len);
            if ((rc = mlc_tp_irecv(tp, c->segs[d].data + off, len, left, c->segs[d].tag, &reqs[d])))
                return mlc_ring_fail(tp, reqs, d, c->nseg, d, rc);
            mlc_ring_block(tp, c, d, mlc_ring_ag_send_block(r, n, s), &off, &len);
            rc = mlc_tp_isend(tp, c->segs[d].data + off, len, right, c->segs[d].tag, &reqs[c->nseg + d]);
            if (rc) return mlc_ring_fail(tp, reqs, d + 1, c->nseg, d, rc);
        }
        if ((rc = mlc_tp_waitall(tp, 2 * c->nseg, reqs))) return rc;
    }
    return MLC_OK;
}
