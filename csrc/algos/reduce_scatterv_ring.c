/* Ring reduce-scatter of rows into blocks whose sizes may differ (reduce-scatterv),
 * pipelined: every rank holds the same rows; rank r ends with block r (recv_rows[r]
 * rows, the blocks in rank order) reduced with op over all ranks.
 *
 * Steps, n ranks: rank r's send stream is its input's block r-1, then its partial
 * results of blocks r-2, ..., r-n+1; its receive stream is rank r-1's partials of
 * blocks r-2, ..., r-n (= r). Each block a rank receives it combines with its own
 * input's block: the partial it forwards, or for block r, complete, its output (an
 * average divided there). The streams are the allgather ring's with the rank shifted
 * by one (base/schedule.c, mlc_gatherv_next), cut into pieces of at most
 * MLC_RING_PIECE_BYTES: each round receives the next piece from r-1 and sends the next
 * piece to r+1 that is ready, so a block's partial moves on piece by piece while the
 * rest of it still arrives. Bytes on the wire per rank: the input less block r+1 sent,
 * less block r received, about (n-1)/n of it each way, in ceil(block /
 * MLC_RING_PIECE_BYTES) messages per block; the ring's n-1 block latencies overlap the
 * transfer. Received pieces wait for their turn to leave in a ring of F + 2 piece slots
 * (F: the pieces of block r-1, sent first), kept in the caller's staging buffer from
 * call to call. The first round may have gone ahead, during the agreement check
 * (ring_ahead.c, c->ahead): its piece is combined from there into slot 0, and the
 * ring starts at its second round. Each element is combined in one fixed order around
 * the ring, the same on every run; each rank ends with its own block only. */
#include <stdlib.h>
#include <string.h>

#include "piece_ring.h"

/* This rank's share of a received piece (from `received`): the partial it forwards,
 * into `partial`, or for block r, complete, its output (an average divided there). */
static void combine(const mlc_rows_call *c, mlc_gatherv_piece piece, const char *received, char *partial,
                    const int64_t *start, int n, int r) {
    const char *mine = c->input + start[piece.block] + piece.offset;
    const int64_t count = piece.bytes / c->elem_size;
    if (piece.block != r) mlc_reduce_op_to(partial, received, mine, count, c->dtype, c->op);
    else if (c->op == MLC_OP_AVERAGE)
        mlc_reduce_sum_average_to(c->output + piece.offset, received, mine, count, c->dtype, n);
    else mlc_reduce_op_to(c->output + piece.offset, received, mine, count, c->dtype, c->op);
}

int mlc_reduce_scatterv_ring(mlc_tp *tp, const mlc_rows_call *c) {
    const int n = tp->size, r = tp->rank, es = c->elem_size;
    const int64_t row_bytes = c->row_elements * es, own_bytes = c->recv_rows[r] * row_bytes;
    const char *own_input = c->input + mlc_rows_before(c->recv_rows, r) * row_bytes;
    if (n == 1) {
        if (own_bytes > 0 && c->output != own_input) memmove(c->output, own_input, own_bytes);
        return MLC_OK;
    }
    int64_t *block_bytes = malloc(2 * n * sizeof *block_bytes);
    if (!block_bytes) {
        if (c->ahead) mlc_ring_ahead_abandon(tp, c->ahead);
        return MLC_ERR_NOMEM;
    }
    int64_t *start = block_bytes + n; /* where block b starts in the input */
    for (int b = 0; b < n; b++) {
        block_bytes[b] = c->recv_rows[b] * row_bytes;
        start[b] = mlc_rows_before(c->recv_rows, b) * row_bytes;
    }
    const int64_t piece = MLC_RING_PIECE_BYTES;
    const int first = mlc_mod(r - 1, n); /* the block this rank sends first, from its input */
    mlc_piece_ring p; /* the streams of the allgather ring of rank r-1 */
    mlc_piece_ring_start(&p, first, n, block_bytes);
    const int64_t slots_bytes = mlc_piece_ring_slots(&p) * piece;
    mlc_buffer own = {NULL, 0}, *staging = c->staging ? c->staging : &own;
    if (staging->bytes < slots_bytes) {
        char *grown = realloc(staging->data, slots_bytes);
        if (!grown) {
            if (c->ahead) mlc_ring_ahead_abandon(tp, c->ahead);
            free(block_bytes);
            return MLC_ERR_NOMEM;
        }
        staging->data = grown;
        staging->bytes = slots_bytes;
    }
    int rc = MLC_OK;
    mlc_gatherv_piece ahead = {0, 0, 0}; /* the first round went during the check */
    if (c->ahead && (rc = mlc_piece_ring_take_ahead(tp, &p, c->ahead, &ahead)) == MLC_OK && ahead.bytes > 0)
        combine(c, ahead, c->ahead->buf, staging->data, start, n, r);
    while (rc == MLC_OK && (p.have_send || p.have_recv)) {
        /* Past block r-1 a rank sends the partials it made, in the order received,
         * from the slots they were received and combined in. */
        const int send_now = mlc_piece_ring_can_send(&p), recv_now = p.have_recv;
        if (!send_now && !recv_now) {
            rc = MLC_ERR_STATE; /* a partial to forward that never arrives: block sizes disagree */
            break;
        }
        const char *sbuf = !send_now ? NULL
                           : p.sent < p.lead ? c->input + start[p.send.block] + p.send.offset
                                             : mlc_piece_ring_send_slot(&p, staging->data);
        char *rbuf = mlc_piece_ring_recv_slot(&p, staging->data);
        rc = mlc_tp_sendrecv(tp, sbuf, send_now ? p.send.bytes : 0, send_now ? (r + 1) % n : -1, rbuf,
                             recv_now ? p.recv.bytes : 0, recv_now ? (r + n - 1) % n : -1, c->tag);
        if (rc) break;
        if (recv_now) combine(c, p.recv, rbuf, rbuf, start, n, r);
        mlc_piece_ring_advance(&p, send_now, recv_now);
    }
    if (staging == &own) free(own.data);
    free(block_bytes);
    return rc;
}
