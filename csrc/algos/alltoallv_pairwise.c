/* Pairwise alltoall of rows (alltoallv): rank r's split d (send_rows[d] rows, in
 * rank order in its input) goes to rank d, which places it at split r of its output.
 *
 * Steps, n ranks: the split to itself is copied; then at step s = 1..n-1 rank r
 * sends its split for rank r+s and receives rank r-s's split for it, in one
 * exchange (base/schedule.c, mlc_pairwise_*). Every rank has one message in each
 * direction per step, so no rank is sent to by two peers at once. Bytes on the
 * wire per rank: its input less its own split sent, its output less its own split
 * received; n-1 message latencies. Splits of no rows travel as empty messages. */
#include <string.h>

#include "algo.h"

int mlc_alltoallv_pairwise(mlc_tp *tp, const mlc_rows_call *c) {
    const int n = tp->size, r = tp->rank;
    const int64_t row_bytes = c->row_elements * c->elem_size;
    const int64_t own = c->send_rows[r] * row_bytes;
    const char *from = c->input + mlc_rows_before(c->send_rows, r) * row_bytes;
    char *to = c->output + mlc_rows_before(c->recv_rows, r) * row_bytes;
    if (own > 0) memmove(to, from, own);
    for (int s = 1; s < n; s++) {
        const int dest = mlc_pairwise_send_peer(r, n, s), src = mlc_pairwise_recv_peer(r, n, s);
        int rc = mlc_tp_sendrecv(tp, c->input + mlc_rows_before(c->send_rows, dest) * row_bytes,
                                 c->send_rows[dest] * row_bytes, dest,
                                 c->output + mlc_rows_before(c->recv_rows, src) * row_bytes,
                                 c->recv_rows[src] * row_bytes, src, c->tag);
        if (rc) return rc;
    }
    return MLC_OK;
}
