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

/* Where the block that step s receives goes: its place in the output, or (relaying)
 * one of two scratch blocks of `largest` bytes, in turn. */
static char *received_at(const mlc_rows_call *c, int b, int s, int64_t row_bytes, char *scratch,
                         int64_t largest) {
    if (!c->output) return scratch ? scratch + (s % 2) * largest : NULL;
    return c->output + mlc_rows_before(c->recv_rows, b) * row_bytes;
}

int mlc_allgatherv_ring(mlc_tp *tp, const mlc_rows_call *c) {
    const int n = tp->size, r = tp->rank;
    const int64_t row_bytes = c->row_elements * c->elem_size;
    const int64_t own = c->recv_rows[r] * row_bytes;
    int64_t largest = 0;
    char *scratch = NULL;
    if (c->output) {
        char *mine = c->output + mlc_rows_before(c->recv_rows, r) * row_bytes;
        if (own > 0 && mine != c->input) memcpy(mine, c->input, own);
    } else {
        for (int b = 0; b < n; b++)
            if (c->recv_rows[b] * row_bytes > largest) largest = c->recv_rows[b] * row_bytes;
        if (largest > 0 && !(scratch = malloc(2 * largest))) return MLC_ERR_NOMEM;
    }
    /* Step 0 sends this rank's own rows; each later step the block the step before received. */
    const char *send = c->output ? c->output + mlc_rows_before(c->recv_rows, r) * row_bytes : c->input;
    int rc = MLC_OK;
    for (int s = 0; s < n - 1 && rc == MLC_OK; s++) {
        const int sb = mlc_ring_gatherv_send_block(r, n, s), rb = mlc_ring_gatherv_recv_block(r, n, s);
        char *into = received_at(c, rb, s, row_bytes, scratch, largest);
        rc = mlc_tp_sendrecv(tp, send, c->recv_rows[sb] * row_bytes, (r + 1) % n, into,
                             c->recv_rows[rb] * row_bytes, (r + n - 1) % n, c->tag);
        send = into;
    }
    free(scratch);
    return rc;
}
