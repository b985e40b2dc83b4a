/* What the pipelined rings of rows share (allgatherv_ring.c, reduce_scatterv_ring.c):
 * a rank's send and receive streams of pieces (base/schedule.c, mlc_gatherv_next), of
 * which it sends `lead` of its own first and then forwards what it received, in the
 * order received. */
#ifndef MLC_PIECE_RING_H
#define MLC_PIECE_RING_H

#include "algo.h"

typedef struct mlc_piece_ring {
    const int64_t *block_bytes;
    mlc_gatherv_cursor send_cursor, recv_cursor;
    mlc_gatherv_piece send, recv; /* the next piece of each stream, while have_* */
    int have_send, have_recv;
    int64_t lead, sent, received;
} mlc_piece_ring;

/* The streams of the allgather ring of stream_rank: it sends block stream_rank first. */
static inline void mlc_piece_ring_start(mlc_piece_ring *p, int stream_rank, int n, const int64_t *block_bytes) {
    const int64_t piece = MLC_RING_PIECE_BYTES;
    p->block_bytes = block_bytes;
    p->send_cursor = mlc_gatherv_start(stream_rank, n, 1);
    p->recv_cursor = mlc_gatherv_start(stream_rank, n, 0);
    p->have_send = mlc_gatherv_next(&p->send_cursor, block_bytes, piece, &p->send);
    p->have_recv = mlc_gatherv_next(&p->recv_cursor, block_bytes, piece, &p->recv);
    p->lead = (block_bytes[stream_rank] + piece - 1) / piece;
    p->sent = p->received = 0;
}

/* The next send piece is here: one of the first `lead` (its own), or one received already. */
static inline int mlc_piece_ring_can_send(const mlc_piece_ring *p) {
    return p->have_send && (p->sent < p->lead || p->sent - p->lead < p->received);
}

/* After a round that sent (sent) and received (received) one piece. */
static inline void mlc_piece_ring_advance(mlc_piece_ring *p, int sent, int received) {
    if (sent) {
        p->sent++;
        p->have_send = mlc_gatherv_next(&p->send_cursor, p->block_bytes, MLC_RING_PIECE_BYTES, &p->send);
    }
    if (received) {
        p->received++;
        p->have_recv = mlc_gatherv_next(&p->recv_cursor, p->block_bytes, MLC_RING_PIECE_BYTES, &p->recv);
    }
}

/* Received pieces that wait for their turn to leave (a relaying rank's, a reduce-scatter's
 * partials) sit in lead + 2 slots of a piece: the j-th received in slot j mod (lead + 2),
 * which no later receive reuses before it has left (a receive is at most lead + 1
 * pieces ahead of the send). */
static inline int64_t mlc_piece_ring_slots(const mlc_piece_ring *p) { return p->lead + 2; }
/* Where the next received piece goes, and where the next one forwarded after the own pieces is. */
static inline char *mlc_piece_ring_recv_slot(const mlc_piece_ring *p, char *slots) {
    return slots + (p->received % mlc_piece_ring_slots(p)) * MLC_RING_PIECE_BYTES;
}
static inline char *mlc_piece_ring_send_slot(const mlc_piece_ring *p, char *slots) {
    return slots + ((p->sent - p->lead) % mlc_piece_ring_slots(p)) * MLC_RING_PIECE_BYTES;
}

/* The first round, sent ahead of the agreement check (ring_ahead.c): completed, and
 * counted as this ring's first round. *first: the piece received ahead, which lies in
 * a->buf (bytes 0: none). Pieces that do not fit this ring's streams mean the ranks'
 * sizes disagree: MLC_ERR_STATE. */
static inline int mlc_piece_ring_take_ahead(mlc_tp *tp, mlc_piece_ring *p, mlc_ring_ahead *a,
                                            mlc_gatherv_piece *first) {
    *first = (mlc_gatherv_piece){0, 0, 0};
    int rc = mlc_ring_ahead_complete(tp, a);
    if (rc) return rc;
    if (a->sent > 0 && !(p->have_send && p->sent == 0 && p->lead > 0 && p->send.bytes == a->sent))
        return MLC_ERR_STATE;
    if (a->expected > 0 && !(p->have_recv && p->recv.offset == 0 && p->recv.bytes == a->expected))
        return MLC_ERR_STATE;
    if (a->expected > 0) *first = p->recv;
    mlc_piece_ring_advance(p, a->sent > 0, a->expected > 0);
    return MLC_OK;
}

#endif
