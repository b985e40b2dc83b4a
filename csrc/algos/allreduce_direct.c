/* Direct allreduce: every rank sends its whole input to every other rank, and
 * each adds the n inputs in rank order (rank 0's first), the same order on every
 * rank, so every rank holds the same bits.
 *
 * Steps: one, all messages at once. Bytes on the wire per rank: (n-1) * N each
 * way, which is (n-1)/2 times the ring's; one message latency in all, where
 * recursive doubling takes log2(n) (+2 for a fold). mlc_allreduce_direct runs
 * it over the transport at any rank count (the loopback tests run it; scratch
 * holds n-1 inputs). Under MLC_ALG_AUTO the plan's "direct" requests do not
 * come here: their inputs ride in the agreement exchange (agree/exchange.c),
 * which sums them along its recursive-doubling tree, so that their cost grows
 * with log2(n), not n.
 * Compression: never (the plan keeps 16-bit values on the wire to the ring). */
#include <stdlib.h>
#include <string.h>

#include "algo.h"

void mlc_direct_sum(void *out, const char *const *inputs, int n, int64_t count, int dtype, int op) {
    if (count == 0) return;
    if (out != inputs[0]) memmove(out, inputs[0], count * mlc_dtype_size(dtype));
    for (int r = 1; r < n; r++) mlc_reduce_sum_into(out, inputs[r], count, dtype);
    if (op == MLC_OP_AVERAGE) mlc_divide_by_ranks(out, count, dtype, n);
}

/* reqs: 2 (n-1) handles; inputs: n pointers (any rank count). */
static int one_segment(mlc_tp *tp, const mlc_algo_call *c, const mlc_segment *seg, mlc_tp_req *reqs,
                       const char **inputs) {
    const int n = tp->size, me = tp->rank;
    const int64_t bytes = seg->count * c->elem_size;
    int rc, posted = 0;

    if ((int64_t)(n - 1) * bytes > c->scratch_bytes) return MLC_ERR_ARG;
    mlc_segment_copy_input(seg, c->elem_size); /* works in place */
    for (int k = 0, slot = 0; k < n; k++) {
        if (k == me) continue;
        if ((rc = mlc_tp_irecv(tp, c->scratch + slot++ * bytes, bytes, k, seg->tag, &reqs[posted]))) {
            mlc_tp_abandon(tp, posted, reqs);
            return rc;
        }
        posted++;
    }
    for (int k = 0; k < n; k++) {
        if (k == me) continue;
        if ((rc = mlc_tp_isend(tp, seg->data, bytes, k, seg->tag, &reqs[posted]))) {
            mlc_tp_abandon(tp, posted, reqs);
            return rc;
        }
        posted++;
    }
    if ((rc = mlc_tp_waitall(tp, posted, reqs))) return rc;
    /* This rank's own input stays where it is; rank 0's is summed first. */
    for (int k = 0, slot = 0; k < n; k++) inputs[k] = k == me ? seg->data : c->scratch + slot++ * bytes;
    if (me != 0) { /* the sum lands in seg->data: keep this rank's input aside first */
        char *mine = c->scratch + (int64_t)(n - 1) * bytes;
        if ((int64_t)n * bytes > c->scratch_bytes) return MLC_ERR_ARG;
        memcpy(mine, seg->data, bytes);
        inputs[me] = mine;
    }
    mlc_direct_sum(seg->data, inputs, n, seg->count, c->dtype, c->op);
    return MLC_OK;
}

int mlc_allreduce_direct(mlc_tp *tp, const mlc_algo_call *c) {
    mlc_tp_req *reqs = malloc(2 * (size_t)tp->size * sizeof *reqs);
    const char **inputs = malloc((size_t)tp->size * sizeof *inputs);
    int rc = reqs && inputs ? MLC_OK : MLC_ERR_NOMEM;
    for (int d = 0; d < c->nseg && rc == MLC_OK; d++) rc = one_segment(tp, c, &c->segs[d], reqs, inputs);
    free(reqs);
    free(inputs);
    return rc;
}
