/* Recursive-doubling allreduce: the latency path for small buffers.
 *
 * Steps, for n ranks, p = the largest power of two <= n, per segment:
 *   fold: ranks r >= p send their buffer to r-p, which adds it in (1 step, only
 *     when n is not a power of two);
 *   doubling, k = 0..log2(p)-1: exchange the whole buffer with r XOR 2^k and add;
 *   unfold: ranks r < n-p send the result back to r+p.
 * Bytes on the wire per rank: log2(p) * N * elem_size each way (+ N for the fold):
 * more than the ring for large N, but only log2(p)+2 message latencies.
 * Determinism: both partners of an exchange compute a+b with the same operands
 * (addition, multiplication, min and max of non-NaN values commute bit for bit), so all ranks hold the same bits after each step.
 * Compression: never; the plan keeps 16-bit values on the wire to the ring (this
 * path's cost is latency, not bytes). */
#include "algo.h"

static int one_segment(mlc_tp *tp, const mlc_algo_call *c, const mlc_segment *seg) {
    const int r = tp->rank, n = tp->size, p2 = mlc_rd_pow2_floor(n);
    const int64_t bytes = seg->count * c->elem_size;
    const int fold = mlc_rd_fold_partner(r, n);
    char *buf = seg->data;
    int rc;

    if (n > 1 && bytes > c->scratch_bytes) return MLC_ERR_ARG;
    mlc_segment_copy_input(seg, c->elem_size); /* works in place */
    if (r >= p2) {
        if ((rc = mlc_tp_send(tp, buf, bytes, fold, seg->tag))) return rc;
        return mlc_tp_recv(tp, buf, bytes, fold, seg->tag); /* already averaged by the partner */
    }
    if (fold >= 0) {
        if ((rc = mlc_tp_recv(tp, c->scratch, bytes, fold, seg->tag))) return rc;
        mlc_reduce_op_to(buf, buf, c->scratch, seg->count, c->dtype, c->op);
    }
    for (int k = 0; k < mlc_rd_nsteps(n); k++) {
        int partner = mlc_rd_partner(r, n, k);
        if ((rc = mlc_tp_sendrecv(tp, buf, bytes, partner, c->scratch, bytes, partner, seg->tag)))
            return rc;
        mlc_reduce_op_to(buf, buf, c->scratch, seg->count, c->dtype, c->op);
    }
    if (c->op == MLC_OP_AVERAGE) mlc_divide_by_ranks(buf, seg->count, c->dtype, n);
    if (fold >= 0) return mlc_tp_send(tp, buf, bytes, fold, seg->tag);
    return MLC_OK;
}

int mlc_allreduce_recursive_doubling(mlc_tp *tp, const mlc_algo_call *c) {
    for (int d = 0; d < c->nseg; d++) {
        int rc = one_segment(tp, c, &c->segs[d]);
        if (rc) return rc;
    }
    return MLC_OK;
}
