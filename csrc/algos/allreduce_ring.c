/* Pipelined ring allreduce: reduce-scatter, then allgather.
 *
 * Steps, for n ranks; each segment of N elements is cut into n balanced blocks:
 *   reduce-scatter, steps s = 0..n-2: send block (r-s) to rank r+1, receive block
 *     (r-s-1) from rank r-1 and add it to the local copy. Rank r then holds the
 *     total of block (r+1); for an average it divides that block, once, here.
 *   allgather, steps s = 0..n-2: send block (r+1-s), receive block (r-s) in place.
 * Bytes on the wire per rank: 2(n-1)/n * N * elem_size sent and as many received,
 * the bandwidth optimum whatever n is. Cost: 2(n-1) message latencies per segment,
 * which is why small buffers take allreduce_recursive_doubling.c instead.
 * Pipelining: a thread runs a batch of segments in lock step. It posts every
 * segment's receive and send of a step before it reduces any, so one segment's
 * transfer proceeds while another's block is being added; the team's threads run
 * their own batches at the same time on their own communicators.
 * Determinism: each block is summed in one fixed order (around the ring) by one
 * rank and then copied to all, so every rank ends with the same bits, run after run.
 */
#include "core.h"

int64_t mlc_allreduce_ring_scratch_bytes(int64_t seg_elems, int size, int elem_size, int nseg) {
    return nseg * ((seg_elems + size - 1) / size) * elem_size;
}

static void block_bytes(const mlc_xfer *x, const mlc_segment *seg, int block, int64_t *off, int64_t *len) {
    mlc_block_range(seg->count, x->size, block, off, len);
    *off *= x->elem_size;
    *len *= x->elem_size;
}

int mlc_allreduce_ring(const mlc_xfer *x, const mlc_segment *segs, int nseg, int op) {
    enum { MAX_BATCH = 8 };
    MPI_Request reqs[2 * MAX_BATCH];
    const int n = x->size, r = x->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    int64_t max_count = 0, off, len, roff, rlen;
    int rc, idx;

    if (nseg > MAX_BATCH) return MLC_ERR_ARG;
    for (int d = 0; d < nseg; d++) max_count = segs[d].count > max_count ? segs[d].count : max_count;
    const int64_t slot = ((max_count + n - 1) / n) * x->elem_size;
    if (n > 1 && slot * nseg > x->scratch_bytes) return MLC_ERR_ARG;

    for (int s = 0; s < n - 1; s++) {
        for (int d = 0; d < nseg; d++) {
            block_bytes(x, &segs[d], mlc_ring_rs_recv_block(r, n, s), &roff, &rlen);
            block_bytes(x, &segs[d], mlc_ring_rs_send_block(r, n, s), &off, &len);
            if ((rc = mlc_tp_irecv(x, x->scratch + d * slot, rlen, left, segs[d].tag, &reqs[d])))
                return rc;
            if ((rc = mlc_tp_isend(x, segs[d].data + off, len, right, segs[d].tag, &reqs[nseg + d])))
                return rc;
        }
        for (int k = 0; k < nseg; k++) {
            if ((rc = mlc_tp_waitany(x, nseg, reqs, &idx))) return rc;
            block_bytes(x, &segs[idx], mlc_ring_rs_recv_block(r, n, s), &roff, &rlen);
            mlc_reduce_sum_into(segs[idx].data + roff, x->scratch + idx * slot, rlen / x->elem_size,
                                x->dtype);
        }
        if ((rc = mlc_tp_waitall(x, nseg, reqs + nseg))) return rc;
    }
    if (op == MLC_OP_AVERAGE) {
        for (int d = 0; d < nseg; d++) {
            block_bytes(x, &segs[d], mlc_ring_ag_send_block(r, n, 0), &off, &len);
            mlc_divide_by_ranks(segs[d].data + off, len / x->elem_size, x->dtype, n);
        }
    }
    for (int s = 0; s < n - 1; s++) {
        for (int d = 0; d < nseg; d++) {
            block_bytes(x, &segs[d], mlc_ring_ag_recv_block(r, n, s), &roff, &rlen);
            block_bytes(x, &segs[d], mlc_ring_ag_send_block(r, n, s), &off, &len);
            if ((rc = mlc_tp_irecv(x, segs[d].data + roff, rlen, left, segs[d].tag, &reqs[d])))
                return rc;
            if ((rc = mlc_tp_isend(x, segs[d].data + off, len, right, segs[d].tag, &reqs[nseg + d])))
                return rc;
        }
        if ((rc = mlc_tp_waitall(x, 2 * nseg, reqs))) return rc;
    }
    return MLC_OK;
}
