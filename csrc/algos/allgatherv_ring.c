/* Ring allgather of rows whose number differs per rank (allgatherv), pipelined:
 * every rank ends with every rank's rows, in rank order.
 *
 * Steps, n ranks: the rank's own rows are copied to their place in the output.
 * Its send stream is its own block, then blocks r-1, ..., r-n+2 as they arrive; its
 * receive stream is blocks r-1, ..., r-n+1 from rank r-1, each straight into its
 * place. Both streams are cut into pieces of at most MLC_RING_PIECE_BYTES that
 * never cross a block (base/schedule.c, mlc_gatherv_next); each round receives the
 * next piece from r-1 and sends the next piece to r+1 that is here already, so a
 * block is forwarded piece by piece while the rest of it still arrives, instead of
 * after all of it (each ring step waited for its whole block: on 4 test-bed nodes,
 * 16 MiB took 57-65 ms that way, as MPICH's own MPI_Allgather ring, and 52 ms as
 * MPICH's MPI_Allgatherv, which pipelines in 32 KiB pieces). Bytes on the wire per
 * rank: (total - own rows) * row bytes received, (total - rows of rank r+1) sent, in
 * ceil(block / MLC_RING_PIECE_BYTES) messages per block each way; the ring's n-1
 * block latencies overlap the transfer. Empty blocks send nothing. Blocks are copied,
 * never computed: every rank holds the same bits.
 *
 * The first round may have gone ahead, during the agreement check (ring_ahead.c,
 * c->ahead): the ring then starts at its second.
 *
 * No output (a rank that could not allocate one): the rank still takes its part,
 * for the ring needs every rank, on the same streams of pieces, but it keeps each
 * received piece only until it has left, in a ring of lead + 2 piece slots (lead: its
 * own pieces, sent first), as the reduce-scatter ring does. (Relaying one ring step
 * at a time instead, a block in, then out, waited on a neighbour that itself waited to
 * forward: beside blocks of more than two pieces the ranks hung.) It keeps none. */
#include <stdlib.h>
#include <string.h>

#include "piece_ring.h"

int mlc_allgatherv_ring(mlc_tp *tp, const mlc_rows_call *c) {
    const int n = tp->size, r = tp->rank;
    const int64_t row_bytes = c->row_elements * c->elem_size, piece = MLC_RING_PIECE_BYTES;
    int64_t *block_bytes = malloc(2 * n * sizeof *block_bytes);
    if (!block_bytes) {
        if (c->ahead) mlc_ring_ahead_abandon(tp, c->ahead);
        return MLC_ERR_NOMEM;
    }
    int64_t *start = block_bytes + n; /* where block b starts in the output */
    for (int b = 0; b < n; b++) {
        block_bytes[b] = c->recv_rows[b] * row_bytes;
        start[b] = mlc_rows_before(c->recv_rows, b) * row_bytes;
    }
    mlc_piece_ring p;
    mlc_piece_ring_start(&p, r, n, block_bytes);
    char *slots = c->output ? NULL : malloc(mlc_piece_ring_slots(&p) * piece);
    if (!c->output && !slots) {
        if (c->ahead) mlc_ring_ahead_abandon(tp, c->ahead);
        free(block_bytes);
        return MLC_ERR_NOMEM;
    }
    if (c->output && block_bytes[r] > 0 && c->output + start[r] != c->input)
        memcpy(c->output + start[r], c->input, block_bytes[r]);
    int rc = MLC_OK;
    if (c->ahead) { /* the first round went during the check: its piece into place */
        mlc_gatherv_piece first;
        rc = mlc_piece_ring_take_ahead(tp, &p, c->ahead, &first);
        if (rc == MLC_OK && first.bytes > 0)
            memcpy(slots ? slots : c->output + start[first.block] + first.offset, c->ahead->buf, first.bytes);
    }
    while (rc == MLC_OK && (p.have_send || p.have_recv)) {
        const int send_now = mlc_piece_ring_can_send(&p), recv_now = p.have_recv;
        if (!send_now && !recv_now) {
            rc = MLC_ERR_STATE; /* a piece to forward that never arrives: block sizes disagree */
            break;
        }
        /* Its own pieces from the input; the others from where they were received: the
         * output, or a relay's slots. */
        const char *sbuf = !send_now         ? NULL
                           : p.sent < p.lead ? c->input + p.send.offset
                           : slots           ? mlc_piece_ring_send_slot(&p, slots)
                                             : c->output + start[p.send.block] + p.send.offset;
        char *rbuf = !recv_now ? NULL
                     : slots   ? mlc_piece_ring_recv_slot(&p, slots)
                               : c->output + start[p.recv.block] + p.recv.offset;
        rc = mlc_tp_sendrecv(tp, sbuf, send_now ? p.send.bytes : 0, send_now ? (r + 1) % n : -1, rbuf,
                             recv_now ? p.recv.bytes : 0, recv_now ? (r + n - 1) % n : -1, c->tag);
        mlc_piece_ring_advance(&p, send_now, recv_now);
    }
    free(slots);
    free(block_bytes);
    return rc;
}
