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

#include "agree.h"

int mlc_arrivals_open(mlc_arrivals *ar, int size) {
    memset(ar, 0, sizeof *ar);
    ar->heard = malloc(size * sizeof *ar->heard);
    ar->inbox = calloc(size, sizeof *ar->inbox);
    ar->outbox = calloc(size, sizeof *ar->outbox);
    ar->reqs = calloc(2 * (size_t)size, sizeof *ar->reqs);
    ar->live = calloc(2 * (size_t)size, 1);
    if (!ar->heard || !ar->inbox || !ar->outbox || !ar->reqs || !ar->live) return MLC_ERR_NOMEM;
    for (int r = 0; r < size; r++) ar->heard[r] = -1;
    return MLC_OK;
}

void mlc_arrivals_cancel(mlc_arrivals *ar, mlc_tp *tp) {
    for (int k = 0; ar->reqs && ar->live && k < 2 * (tp->size - 1); k++)
        if (ar->live[k]) mlc_tp_abandon(tp, 1, &ar->reqs[k]), ar->live[k] = 0;
}

void mlc_arrivals_close(mlc_arrivals *ar) {
    free(ar->heard);
    free(ar->inbox);
    free(ar->outbox);
    free(ar->reqs);
    free(ar->live);
    memset(ar, 0, sizeof *ar);
}

static int peer_of(const mlc_tp *tp, int k) { return k < tp->rank ? k : k + 1; }

static void post_receive(mlc_arrivals *ar, mlc_tp *tp, int k) {
    ar->live[k] = mlc_tp_irecv(tp, &ar->inbox[k], sizeof *ar->inbox, peer_of(tp, k), MLC_AGREE_NOTICE_TAG,
                               &ar->reqs[k]) == MLC_OK; /* one not posted: its rank reads as not heard */
}

/* 1 when the live entry k has completed (it is then no longer live). */
static int completed(mlc_arrivals *ar, mlc_tp *tp, int k) {
    int done = 0;
    if (!ar->live[k]) return 0;
    if (mlc_tp_testall(tp, 1, &ar->reqs[k], &done) != MLC_OK) {
        mlc_tp_abandon(tp, 1, &ar->reqs[k]);
        done = 1;
    }
    if (done) ar->live[k] = 0;
    return done;
}

void mlc_arrivals_announce(mlc_arrivals *ar, mlc_tp *tp, int64_t seq) {
    const int npeers = tp->size - 1;
    if (!ar->posted) {
        for (int k = 0; k < npeers; k++) post_receive(ar, tp, k);
        ar->posted = 1;
    }
    for (int k = 0; k < npeers; k++) {
        const int s = npeers + k;
        completed(ar, tp, s);
        if (ar->live[s]) continue; /* the previous notice is still on its way */
        ar->outbox[k] = seq;
        ar->live[s] = mlc_tp_isend(tp, &ar->outbox[k], sizeof *ar->outbox, peer_of(tp, k), MLC_AGREE_NOTICE_TAG,
                                   &ar->reqs[s]) == MLC_OK;
    }
}

/* Take every notice that came, and post the receive again. */
static void collect(mlc_arrivals *ar, mlc_tp *tp) {
    for (int k = 0; k < tp->size - 1; k++) {
        while (completed(ar, tp, k)) {
            const int peer = peer_of(tp, k);
            if (ar->inbox[k] > ar->heard[peer]) ar->heard[peer] = ar->inbox[k];
            post_receive(ar, tp, k);
        }
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

void mlc_arrivals_heard(mlc_arrivals *ar, int peer, int64_t round) {
    if (ar->heard && round > ar->heard[peer]) ar->heard[peer] = round;
}

int mlc_arrivals_waiting_in(mlc_arrivals *ar, mlc_tp *tp, int64_t round) {
    if (!ar->heard) return -1;
    if (ar->posted) collect(ar, tp);
    for (int r = 0; r < tp->size; r++)
        if (r != tp->rank && ar->heard[r] >= round) return r;
    return -1;
}
