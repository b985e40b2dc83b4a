/* A ring's first round sent ahead: posted before the agreement check, completed
 * after it, so that the link carries the first piece while the check's small messages
 * go back and forth (on 4 test-bed nodes the check of a 1 MiB allgather took 215-380 us,
 * a tenth of the whole call, with the link idle).
 *
 * Steps: before the check, the rank sends its first piece (at most
 * MLC_RING_PIECE_BYTES of its own rows) to r+1 and posts a receive of at most one
 * piece from r-1, on MLC_AHEAD_TAG; after the check, every rank knows what its
 * neighbours sent ahead (the agreed sizes, or their signatures after a disagreement).
 * A rank that sent nothing while r+1 did sends r+1 an empty message, which its posted
 * receive waits for; a rank that posted no receive while r-1 sent posts it now; each
 * waits for both. Bytes on the wire: the ring's own first piece, and an empty message
 * to each rank that sent ahead beside a left neighbour that did not. */
#include "algo.h"

static int left_of(const mlc_tp *tp) { return (tp->rank + tp->size - 1) % tp->size; }

/* Nothing posted, nothing known. */
static void clear(mlc_ring_ahead *a) {
    a->sent = a->expected = a->right_sent = 0;
    a->send_posted = a->recv_posted = 0;
}

int mlc_ring_ahead_post(mlc_tp *tp, mlc_ring_ahead *a, const char *own, int64_t sent) {
    clear(a);
    if (sent <= 0) return MLC_OK;
    int rc = mlc_tp_irecv(tp, a->buf, MLC_RING_PIECE_BYTES, left_of(tp), MLC_AHEAD_TAG, &a->recv);
    a->recv_posted = rc == MLC_OK;
    if (rc == MLC_OK) {
        rc = mlc_tp_isend(tp, own, sent, (tp->rank + 1) % tp->size, MLC_AHEAD_TAG, &a->send);
        a->send_posted = rc == MLC_OK;
        if (rc == MLC_OK) a->sent = sent;
    }
    if (rc != MLC_OK) mlc_ring_ahead_abandon(tp, a);
    return rc;
}

int mlc_ring_ahead_complete(mlc_tp *tp, mlc_ring_ahead *a) {
    int rc = MLC_OK;
    if (a->sent == 0 && a->right_sent > 0 && !a->send_posted) { /* r+1's receive waits for one */
        rc = mlc_tp_isend(tp, a->buf, 0, (tp->rank + 1) % tp->size, MLC_AHEAD_TAG, &a->send);
        a->send_posted = rc == MLC_OK;
    }
    if (rc == MLC_OK && !a->recv_posted && (a->expected > 0 || a->sent > 0)) {
        rc = mlc_tp_irecv(tp, a->buf, MLC_RING_PIECE_BYTES, left_of(tp), MLC_AHEAD_TAG, &a->recv);
        a->recv_posted = rc == MLC_OK;
    }
    if (rc == MLC_OK && a->send_posted && (rc = mlc_tp_waitall(tp, 1, &a->send)) == MLC_OK) a->send_posted = 0;
    if (rc == MLC_OK && a->recv_posted && (rc = mlc_tp_waitall(tp, 1, &a->recv)) == MLC_OK) a->recv_posted = 0;
    if (rc != MLC_OK) mlc_ring_ahead_abandon(tp, a);
    return rc;
}

void mlc_ring_ahead_abandon(mlc_tp *tp, mlc_ring_ahead *a) {
    if (a->send_posted) mlc_tp_abandon(tp, 1, &a->send);
    if (a->recv_posted) mlc_tp_abandon(tp, 1, &a->recv);
    clear(a);
}
