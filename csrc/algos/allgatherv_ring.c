/* Ring allgather of rows whose number differs per rank (allgatherv): every rank
 * ends with every rank's rows, in rank order.
 *
 * Steps, n ranks: the rank's own rows are copied to their place in the output;
 * then at step s = 0..n-2 rank r sends block r-s to rank r+1 and receives block
 * r-s-1 from rank r-1, straight into its place (base/schedule.c,
 * mlc_ring_gatherv_*): each block is received once and forwarded as it arrived.
 * Bytes on the wire per rank: (total - own rows) * row bytes received, (total -
 * rows of rank r+1) sent; n-1 message latencies. A rank with no rows takes part
 * with empty messages. Blocks are copied, never computed: every rank holds the
 * same bits.
 *
 * No output (a rank that could not allocate one): the rank still takes its part,
 * for the ring needs every rank, but relays: each block it receives goes into one
 * of two scratch blocks and out again at the next step, and it keeps none. */
#include <stdlib.h>
#include <string.h>

#include "algo.h"

static int relay(mlc_tp *tp, const mlc_rows_call *c) {
    const int n = tp->size, r = tp->rank;
    const int64_t row_bytes = c->row_elements * c->elem_size;
    int64_t largest = 0;
    for (int b = 0; b < n; b++)
        if (c->recv_rows[b] * row_bytes > largest) largest = c->recv_rows[b] * row_bytes;
    char *scratch = largest > 0 ? malloc(2 * largest) : NULL;
    if (largest > 0 && !scratch) return MLC_ERR_NOMEM;
    const char *send = c->input; /* step 0 sends this rank's own rows */
    int rc = MLC_OK;
    for (int s = 0; s < n - 1 && rc == MLC_OK; s++) {
        const int sb = mlc_ring_gatherv_send_block(r, n, s), rb = mlc_ring_gatherv_recv_block(r, n, s);
        char *into = scratch ? scratch + (s % 2) * largest : NULL;
        rc = mlc_tp_sendrecv(tp, send, c->recv_rows[sb] * row_bytes, (r + 1) % n, into,
                             c->recv_rows[rb] * row_bytes, (r + n - 1) % n, c->tag);
        send = into;
    }
    free(scratch);
    return rc;
}

int mlc_allgatherv_ring(mlc_tp *tp, const mlc_rows_call *c) {
    if (!c->output) return relay(tp, c);
    const int n = tp->size, r = tp->rank;
    const int64_t row_bytes = c->row_elements * c->elem_size;
    const int64_t own = c->recv_rows[r] * row_bytes;
    char *mine = c->output + mlc_rows_before(c->recv_rows, r) * row_bytes;
    if (own > 0 && mine != c->input) memcpy(mine, c->input, own);
    for (int s = 0; s < n - 1; s++) {
        const int sb = mlc_ring_gatherv_send_block(r, n, s), rb = mlc_ring_gatherv_recv_block(r, n, s);
        int rc = mlc_tp_sendrecv(tp, c->output + mlc_rows_before(c->recv_rows, sb) * row_bytes,
                                 c->recv_rows[sb] * row_bytes, (r + 1) % n,
                                 c->output + mlc_rows_before(c->recv_rows, rb) * row_bytes,
                                 c->recv_rows[rb] * row_bytes, (r + n - 1) % n, c->tag);
        if (rc) return rc;
    }
    return MLC_OK;
}
