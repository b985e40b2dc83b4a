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
 * call to call. Each element is combined in one fixed order around the ring, the same
 * on every run; each rank ends with its own block only. */
#include <stdlib.h>
#include <string.h>

#include "algo.h"

static int mod(int a, int n) { return ((a % n) + n) % n; }

int mlc_reduce_scatterv_ring(mlc_tp *tp, const mlc_rows_call *c) {
    const int n = tp->size, r = tp->rank, es = c->elem_size;
    const int64_t row_bytes = c->row_elements * es, own_bytes = c->recv_rows[r] * row_bytes;
    const char *own_input = c->input + mlc_rows_before(c->recv_rows, r) * row_bytes;
    if (n == 1) {
        if (own_bytes > 0 && c->output != own_input) memmove(c->output, own_input, own_bytes);
        return MLC_OK;
    }
    int64_t *block_bytes = malloc(2 * n * sizeof *block_bytes);
    if (!block_bytes) return MLC_ERR_NOMEM;
    int64_t *start = block_bytes + n; /* where block b starts in the input */
    for (int b = 0; b < n; b++) {
        block_bytes[b] = c->recv_rows[b] * row_bytes;
        start[b] = mlc_rows_before(c->recv_rows, b) * row_bytes;
    }
    const int64_t piece = MLC_RING_PIECE_BYTES;
    const int first = mod(r - 1, n); /* the block this rank sends first, from its input */
    const int64_t first_pieces = (block_bytes[first] + piece - 1) / piece, nslots = first_pieces + 2;
    mlc_buffer own = {NULL, 0}, *staging = c->staging ? c->staging : &own;
    if (staging->bytes < nslots * piece) {
        char *grown = realloc(staging->data, nslots * piece);
        if (!grown) {
            free(block_bytes);
            return MLC_ERR_NOMEM;
        }
        staging->data = grown;
        staging->bytes = nslots * piece;
    }
    /* The streams of the allgather ring of rank r-1: sends block r-1 first, receives r-2 first. */
    mlc_gatherv_cursor sc = mlc_gatherv_start(first, n, 1), rcur = mlc_gatherv_start(first, n, 0);
    mlc_gatherv_piece sp, rp;
    int have_send = mlc_gatherv_next(&sc, block_bytes, piece, &sp);
    int have_recv = mlc_gatherv_next(&rcur, block_bytes, piece, &rp);
    int64_t sent = 0, received = 0;
    int rc = MLC_OK;
    while (rc == MLC_OK && (have_send || have_recv)) {
        /* Past block r-1 a rank sends the partials it made, in the order received:
         * partial j sits in slot j mod nslots, which no later receive reuses before it
         * has left (a receive is at most first_pieces + 1 pieces ahead of the send). */
        const int send_now = have_send && (sent < first_pieces || sent - first_pieces < received);
        const char *sbuf = !send_now ? NULL
                           : sent < first_pieces ? c->input + start[sp.block] + sp.offset
                                                  : staging->data + ((sent - first_pieces) % nslots) * piece;
        char *rbuf = staging->data + (received % nslots) * piece;
        if (send_now && have_recv)
            rc = mlc_tp_sendrecv(tp, sbuf, sp.bytes, (r + 1) % n, rbuf, rp.bytes, (r + n - 1) % n, c->tag);
        else if (send_now) rc = mlc_tp_send(tp, sbuf, sp.bytes, (r + 1) % n, c->tag);
        else if (have_recv) rc = mlc_tp_recv(tp, rbuf, rp.bytes, (r + n - 1) % n, c->tag);
        else rc = MLC_ERR_STATE; /* a partial to forward that never arrives: block sizes disagree */
        if (rc) break;
        if (have_recv) { /* this rank's share: a partial to forward, or its own block done */
            const char *mine = c->input + start[rp.block] + rp.offset;
            const int64_t count = rp.bytes / es;
            if (rp.block != r) mlc_reduce_op_to(rbuf, rbuf, mine, count, c->dtype, c->op);
            else if (c->op == MLC_OP_AVERAGE)
                mlc_reduce_sum_average_to(c->output + rp.offset, rbuf, mine, count, c->dtype, n);
            else mlc_reduce_op_to(c->output + rp.offset, rbuf, mine, count, c->dtype, c->op);
            received++;
            have_recv = mlc_gatherv_next(&rcur, block_bytes, piece, &rp);
        }
        if (send_now) {
            sent++;
            have_send = mlc_gatherv_next(&sc, block_bytes, piece, &sp);
        }
    }
    if (staging == &own) free(own.data);
    free(block_bytes);
    return rc;
}
