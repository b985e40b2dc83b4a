/* Ring reduce-scatter of rows into blocks whose sizes may differ (reduce-scatterv):
 * every rank holds the same rows; rank r ends with block r (recv_rows[r] rows,
 * the blocks in rank order) reduced with op over all ranks.
 *
 * Steps, n ranks: at step s = 0..n-2 rank r sends its partial result of block
 * r-s-1 to rank r+1 (its own input at step 0) and receives rank r-1's partial of
 * block r-s-2, which it combines with its own input's block: the partial it sends
 * next (base/schedule.c, mlc_ring_scatterv_*). The last step receives block r,
 * which after this rank's share is complete and goes to the output (an average
 * divided there). Bytes on the wire per rank: the input less block r+1 sent, less
 * block r received, about (n-1)/n of it each way; n-1 message latencies.
 * Two staging blocks (the one arriving, the one leaving) of the largest block,
 * kept in the caller's staging buffer from call to call. Each block is combined in one fixed order around the
 * ring, the same on every run; each rank ends with its own block only. */
#include <stdlib.h>
#include <string.h>

#include "algo.h"

int mlc_reduce_scatterv_ring(mlc_tp *tp, const mlc_rows_call *c) {
    const int n = tp->size, r = tp->rank, es = c->elem_size;
    const int64_t row_elems = c->row_elements, own_count = c->recv_rows[r] * row_elems;
    const char *own_input = c->input + mlc_rows_before(c->recv_rows, r) * row_elems * es;
    if (n == 1) {
        if (own_count > 0 && c->output != own_input) memmove(c->output, own_input, own_count * es);
        return MLC_OK;
    }
    int64_t largest = 0;
    for (int b = 0; b < n; b++)
        if (c->recv_rows[b] > largest) largest = c->recv_rows[b];
    const int64_t slot = largest * row_elems * es;
    mlc_buffer own = {NULL, 0}, *staging = c->staging ? c->staging : &own;
    if (staging->bytes < 2 * slot) {
        char *grown = realloc(staging->data, 2 * slot);
        if (!grown) return MLC_ERR_NOMEM;
        staging->data = grown;
        staging->bytes = 2 * slot;
    }
    char *arriving = staging->data, *leaving = arriving + slot;
    int rc = MLC_OK;
    for (int s = 0; s < n - 1 && rc == MLC_OK; s++) {
        const int sb = mlc_ring_scatterv_send_block(r, n, s), rb = mlc_ring_scatterv_recv_block(r, n, s);
        const int64_t send_count = c->recv_rows[sb] * row_elems, recv_count = c->recv_rows[rb] * row_elems;
        const char *send = s == 0 ? c->input + mlc_rows_before(c->recv_rows, sb) * row_elems * es : leaving;
        rc = mlc_tp_sendrecv(tp, send, send_count * es, (r + 1) % n, arriving, recv_count * es,
                             (r + n - 1) % n, c->tag);
        if (rc) break;
        const char *mine = c->input + mlc_rows_before(c->recv_rows, rb) * row_elems * es;
        if (s < n - 2) {
            mlc_reduce_op_to(leaving, arriving, mine, recv_count, c->dtype, c->op);
        } else if (c->op == MLC_OP_AVERAGE) {
            mlc_reduce_sum_average_to(c->output, arriving, mine, recv_count, c->dtype, n);
        } else {
            mlc_reduce_op_to(c->output, arriving, mine, recv_count, c->dtype, c->op);
        }
    }
    if (staging == &own) free(own.data);
    return rc;
}
