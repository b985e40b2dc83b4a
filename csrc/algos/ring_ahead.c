/* A ring's first round sent ahead: posted before the agreement check, completed
 * after it, so that the link carries the first piece while the check's small messages
 * go back and forth (on 4 test-bed nodes the check of a 1 MiB allgather took 215-380 us,
 * a tenth of the whole call, with the link idle).
 *
 * Steps: before the check, the rank sends its first piece (at most
 * MLC_RING_PIECE_BYTES of its own rows) to r+1 and posts a receive of at most one
 * piece from r-1, on the check's ahead tag; after the check, every rank knows what
 * its left neighbour sent ahead (the agreed sizes, or its signature after a
 * disagreement), so it posts the receive now if it had not, or cancels it when
 * nothing comes, and waits for both. Bytes on the wire: the ring's own first piece,
 * nothing more; no message of its own. */
#include "algo.h"

static int left_of(const mlc_tp *tp) { return (tp->rank + tp->size - 1) % tp->size; }

int mlc_ring_ahead_post(mlc_tp *tp, mlc_ring_ahead *a, const char *own, int64_t sent, int post_recv) {
    a->sent = a->expected = 0;
    a->send_posted = a->recv_posted = 0;
    int rc = MLC_OK;
    if (post_recv) {
        rc = mlc_tp_irecv(tp, a->buf, MLC_RING_PIECE_BYTES, left_of(tp), a->tag, &a->recv);
        a->recv_posted = rc == MLC_OK;
    }
    if (rc == MLC_OK && sent > 0) {
        rc = mlc_tp_isend(tp, own, sent, (tp->rank + 1) % tp->size, a->tag, &a->send);
        a->send_posted = rc == MLC_OK;
        if (rc == MLC_OK) a->sent = sent;
    }
    if (rc != MLC_OK) mlc_ring_ahead_abandon(tp, a);
    return rc;
}

int mlc_ring_ahead_complete(mlc_tp *tp, mlc_ring_ahead *a) {
    int rc = MLC_OK;
    if (a->expected == 0 && a->recv_posted) { /* nothing comes from r-1 on this tag */
        mlc_tp_abandon(tp, 1, &a->recv);
        a->recv_posted = 0;
    } else if (a->expected > 0 && !a->recv_posted) {
        rc = mlc_tp_irecv(tp, a->buf, MLC_RING_PIECE_BYTES, left_of(tp), a->tag, &a->recv);
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
    a->sent = a->expected = 0;
    a->send_posted = a->recv_posted = 0;
}
