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
 * No output (a rank that could not allocate one): the rank still takes its part,
 * for the ring needs every rank, but relays one ring step at a time, each block
 * into one of two scratch blocks and out again at the next step; it keeps none. */
#include <stdlib.h>
#include <string.h>

#include "piece_ring.h"

/* Relaying, one ring step at a time through two scratch blocks. The messages are the
 * neighbours' pieces (a block-sized receive would not match a block sent in pieces). */
static int relay(mlc_tp *tp, const mlc_rows_call *c, const int64_t *block_bytes) {
    const int n = tp->size, r = tp->rank;
    int64_t largest = 0;
    for (int b = 0; b < n; b++)
        if (block_bytes[b] > largest) largest = block_bytes[b];
    char *scratch = largest > 0 ? malloc(2 * largest) : NULL;
    if (largest > 0 && !scratch) return MLC_ERR_NOMEM;
    const char *send = c->input;
    int rc = MLC_OK;
    for (int s = 0; s < n - 1 && rc == MLC_OK; s++) {
        const int sb = mlc_ring_gatherv_send_block(r, n, s), rb = mlc_ring_gatherv_recv_block(r, n, s);
        char *into = scratch ? scratch + (s % 2) * largest : NULL;
        /* The step's pieces, sent and received in lockstep as the neighbours do. */
        for (int64_t so = 0, ro = 0; rc == MLC_OK && (so < block_bytes[sb] || ro < block_bytes[rb]);) {
            const int64_t sn = block_bytes[sb] - so < MLC_RING_PIECE_BYTES ? block_bytes[sb] - so : MLC_RING_PIECE_BYTES;
            const int64_t rn = block_bytes[rb] - ro < MLC_RING_PIECE_BYTES ? block_bytes[rb] - ro : MLC_RING_PIECE_BYTES;
            rc = mlc_tp_sendrecv(tp, send + so, sn, sn > 0 ? (r + 1) % n : -1, into + ro, rn,
                                 rn > 0 ? (r + n - 1) % n : -1, c->tag);
            so += sn;
            ro += rn;
        }
        send = into;
    }
    free(scratch);
    return rc;
}

int mlc_allgatherv_ring(mlc_tp *tp, const mlc_rows_call *c) {
    const int n = tp->size, r = tp->rank;
    const int64_t row_bytes = c->row_elements * c->elem_size;
    int64_t *block_bytes = malloc(n * sizeof *block_bytes);
    if (!block_bytes) return MLC_ERR_NOMEM;
    for (int b = 0; b < n; b++) block_bytes[b] = c->recv_rows[b] * row_bytes;
    if (!c->output) {
        int rc = relay(tp, c, block_bytes);
        free(block_bytes);
        return rc;
    }
    char *mine = c->output + mlc_rows_before(c->recv_rows, r) * row_bytes;
    if (block_bytes[r] > 0 && mine != c->input) memcpy(mine, c->input, block_bytes[r]);
    /* Where block b starts in the output. */
    int64_t *start = malloc(n * sizeof *start);
    if (!start) {
        free(block_bytes);
        return MLC_ERR_NOMEM;
    }
    for (int b = 0; b < n; b++) start[b] = mlc_rows_before(c->recv_rows, b) * row_bytes;
    mlc_piece_ring p;
    mlc_piece_ring_start(&p, r, n, block_bytes);
    int rc = MLC_OK;
    while (rc == MLC_OK && (p.have_send || p.have_recv)) {
        const int send_now = mlc_piece_ring_can_send(&p), recv_now = p.have_recv;
        if (!send_now && !recv_now) {
            rc = MLC_ERR_STATE; /* a piece to forward that never arrives: block sizes disagree */
            break;
        }
        rc = mlc_tp_sendrecv(tp, send_now ? c->output + start[p.send.block] + p.send.offset : NULL,
                             send_now ? p.send.bytes : 0, send_now ? (r + 1) % n : -1,
                             recv_now ? c->output + start[p.recv.block] + p.recv.offset : NULL,
                             recv_now ? p.recv.bytes : 0, recv_now ? (r + n - 1) % n : -1, c->tag);
        mlc_piece_ring_advance(&p, send_now, recv_now);
    }
    free(start);
    free(block_bytes);
    return rc;
}
