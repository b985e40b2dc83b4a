/* Arrival notices: which ranks have reached a stalled request.
 *
 * The agreement exchange runs along a recursive-doubling tree, so a waiting rank
 * knows only the partner of its current step, and that partner may itself wait
 * for another. Nothing of this runs while requests flow: only a wait in the
 * exchange that passes half the stall warning limit (exchange.c) announces
 * itself. Steps: on its first announcement a rank posts one receive per peer for
 * notices (they stay posted, for later stalls, until the team closes); every
 * announcement sends each peer an 8-byte notice "this rank waits in request S".
 * A rank that waits in the same request announces itself by the same rule, so
 * by the warning every rank that arrived at least half the limit earlier has
 * said so, and the warning names the peers no notice of S came from. A notice
 * of a later request also counts (that rank is past S). O(n) messages, on the
 * exchange's communicator under a tag of their own, only after a stall. A send
 * to a peer that has not taken the previous notice is skipped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrivals.h"

#define MLC_NOTICE_TAG 2

int mlc_arrivals_open(mlc_arrivals *ar, int size) {
    memset(ar, 0, sizeof *ar);
    ar->heard = malloc(size * sizeof *ar->heard);
    ar->inbox = calloc(size, sizeof *ar->inbox);
    ar->reqs = calloc(2 * (size_t)size, sizeof *ar->reqs);
    if (!ar->heard || !ar->inbox || !ar->reqs) return MLC_ERR_NOMEM;
    for (int r = 0; r < size; r++) ar->heard[r] = -1;
    return MLC_OK;
}

void mlc_arrivals_close(mlc_arrivals *ar, mlc_tp *tp) {
    if (ar->posted && ar->reqs) mlc_tp_abandon(tp, 2 * (tp->size - 1), ar->reqs);
    free(ar->heard);
    free(ar->inbox);
    free(ar->reqs);
    memset(ar, 0, sizeof *ar);
}

static int peer_of(const mlc_tp *tp, int k) { return k < tp->rank ? k : k + 1; }

void mlc_arrivals_announce(mlc_arrivals *ar, mlc_tp *tp, int64_t seq) {
    const int npeers = tp->size - 1;
    if (!ar->posted) {
        for (int k = 0; k < npeers; k++)
            if (mlc_tp_irecv(tp, &ar->inbox[k], sizeof *ar->inbox, peer_of(tp, k), MLC_NOTICE_TAG,
                             &ar->reqs[k]) != MLC_OK)
                break; /* those not posted stay inactive: their ranks read as not heard */
        ar->posted = 1;
    }
    ar->outbox = seq;
    for (int k = 0; k < npeers; k++) {
        mlc_tp_req *send = &ar->reqs[npeers + k];
        int done = 0;
        if (mlc_tp_testall(tp, 1, send, &done) != MLC_OK || !done) continue;
        mlc_tp_isend(tp, &ar->outbox, sizeof ar->outbox, peer_of(tp, k), MLC_NOTICE_TAG, send);
    }
}

/* Take every notice that came, and post the receive again. */
static void collect(mlc_arrivals *ar, mlc_tp *tp) {
    const int npeers = tp->size - 1;
    for (;;) {
        int k = -1;
        if (mlc_tp_testany(tp, npeers, ar->reqs, &k) != MLC_OK || k < 0) return;
        const int peer = peer_of(tp, k);
        if (ar->inbox[k] > ar->heard[peer]) ar->heard[peer] = ar->inbox[k];
        mlc_tp_irecv(tp, &ar->inbox[k], sizeof *ar->inbox, peer, MLC_NOTICE_TAG, &ar->reqs[k]);
    }
}

void mlc_arrivals_describe(mlc_arrivals *ar, mlc_tp *tp, int64_t seq, char *buf, size_t len) {
    char ranks[MLC_MSG_LEN] = "";
    size_t off = 0;
    int missing = 0;
    collect(ar, tp);
    for (int r = 0; r < tp->size; r++) {
        if (r == tp->rank || ar->heard[r] >= seq) continue;
        mlc_append(ranks, sizeof ranks, &off, "%s%d", missing++ ? ", " : "", r);
    }
    if (missing) snprintf(buf, len, "%s %s to reach it", missing == 1 ? "rank" : "ranks", ranks);
    else snprintf(buf, len, "the other ranks' messages (every rank reached it)");
}
