/* Recursive-doubling allreduce: the latency path for small buffers.
 *
 * Steps, for n ranks, p = the largest power of two <= n:
 *   fold: ranks r >= p send their buffer to r-p, which adds it in (1 step, only
 *     when n is not a power of two);
 *   doubling, k = 0..log2(p)-1: exchange the whole buffer with r XOR 2^k and add;
 *   unfold: ranks r < n-p send the result back to r+p.
 * Bytes on the wire per rank: log2(p) * N * elem_size each way (+ N for the fold):
 * more than the ring for large N, but only log2(p)+2 message latencies.
 * Determinism: both partners of an exchange compute a+b with the same operands
 * (addition commutes bit for bit), so all ranks hold the same bits after each step.
 */
#include "core.h"

int mlc_allreduce_recursive_doubling(const mlc_xfer *x, char *buf, int64_t count, int op, int tag) {
    const int r = x->rank, n = x->size, p2 = mlc_rd_pow2_floor(n);
    const int64_t bytes = count * x->elem_size;
    const int fold = mlc_rd_fold_partner(r, n);
    int rc;

    if (n > 1 && bytes > x->scratch_bytes) return MLC_ERR_ARG;
    if (r >= p2) {
        if ((rc = mlc_tp_send(x, buf, bytes, fold, tag))) return rc;
        return mlc_tp_recv(x, buf, bytes, fold, tag); /* already averaged by the partner */
    }
    if (fold >= 0) {
        if ((rc = mlc_tp_recv(x, x->scratch, bytes, fold, tag))) return rc;
        mlc_reduce_sum_into(buf, x->scratch, count, x->dtype);
    }
    for (int k = 0; k < mlc_rd_nsteps(n); k++) {
        int partner = mlc_rd_partner(r, n, k);
        if ((rc = mlc_tp_sendrecv(x, buf, bytes, partner, x->scratch, bytes, partner, tag))) return rc;
        mlc_reduce_sum_into(buf, x->scratch, count, x->dtype);
    }
    if (op == MLC_OP_AVERAGE) mlc_divide_by_ranks(buf, count, x->dtype, n);
    if (fold >= 0) return mlc_tp_send(x, buf, bytes, fold, tag);
    return MLC_OK;
}
