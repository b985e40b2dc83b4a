/* Deadlocks found in minutes: every rank waits inside ml_comm, each for requests the others
 * have not made, and nothing can change that (a thread that calls two teams in one order on
 * one rank and in the other order on another).
 *
 * A rank is stuck while some caller thread of it is blocked inside ml_comm (a blocking call,
 * or a wait for a request) and some agreement exchange of it has waited a quarter of the
 * limit for peers to reach it: both, because a rank whose callers are not blocked is busy
 * outside ml_comm (a rank-0 evaluation, a checkpoint) and will come, and an exchange that
 * waits is what tells "the others have not made this request" from a slow transfer (ranks in
 * a request's data have all reached it). That long wait can stay the stall abort's (half an
 * hour); a job in which every rank is stuck cannot move, however long it waits.
 *
 * Steps: nothing is sent while waits are short. Once an exchange of this rank has waited a
 * quarter of the limit, this rank posts one receive per peer (kept, for later waits) and
 * sends every peer a notice whenever its stuck state changes: stuck or not, and its oldest
 * long wait ("team 0 request 3 (average of ...)"). It keeps the latest notice of each peer.
 * When this rank is stuck, every peer's latest notice says stuck, and that has held for a
 * quarter of the limit while this rank's oldest wait has lasted the whole limit, it prints
 * one line naming every rank's wait (grouped) and aborts the job. Every rank reaches the same
 * verdict at about the same time; the first abort ends them all.
 * Bytes on the wire: none while waits are short; after, a notice of 144 bytes to each peer
 * per change of state: O(n) messages per rank per stall. */
#include "waits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MLC_WAITS_TAG 0
/* The exit status of a deadlock abort: the stall abort's. */
#define MLC_DEADLOCK_EXIT_CODE 3

typedef struct notice {
    int32_t stuck;
    int32_t pad;
    double waited; /* the sender's oldest long wait so far, seconds */
    char what[MLC_WAIT_TEXT];
} notice;

struct mlc_waits {
    mlc_tp tp;
    char tp_message[MLC_MSG_LEN];
    void (*abort_job)(void *arg, int exit_code);
    void *abort_arg;
    _Atomic int callers; /* caller threads blocked inside ml_comm */
    _Atomic double limit;
    pthread_mutex_t lock; /* everything below; pollers only try it */
    mlc_wait *waits;      /* this rank's long waits, oldest first */
    int posted;           /* the receives are posted */
    int announced;        /* what this rank last told the others: stuck or not */
    notice *inbox, *outbox, *peers; /* per rank: a receive's buffer, a send's, the latest heard */
    mlc_tp_req *recvs, *sends;
    char *recv_live, *send_live;
    double all_stuck_since; /* 0: not every rank stuck */
    int aborting;
};

mlc_waits *mlc_waits_create(const mlc_tp *tp, void (*abort_job)(void *, int), void *abort_arg) {
    mlc_waits *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    const size_t n = (size_t)tp->size;
    b->tp = *tp;
    b->tp.message = b->tp_message;
    b->tp.progress = NULL;
    b->abort_job = abort_job;
    b->abort_arg = abort_arg;
    atomic_init(&b->callers, 0);
    atomic_init(&b->limit, MLC_DEFAULT_DEADLOCK_SECONDS);
    pthread_mutex_init(&b->lock, NULL);
    b->inbox = calloc(n, sizeof *b->inbox);
    b->outbox = calloc(n, sizeof *b->outbox);
    b->peers = calloc(n, sizeof *b->peers);
    b->recvs = calloc(n, sizeof *b->recvs);
    b->sends = calloc(n, sizeof *b->sends);
    b->recv_live = calloc(n, 1);
    b->send_live = calloc(n, 1);
    if (!b->inbox || !b->outbox || !b->peers || !b->recvs || !b->sends || !b->recv_live || !b->send_live) {
        mlc_waits_destroy(b);
        return NULL;
    }
    return b;
}

void mlc_waits_destroy(mlc_waits *b) {
    if (!b) return;
    for (int r = 0; b->recv_live && r < b->tp.size; r++) {
        if (b->recv_live[r]) mlc_tp_abandon(&b->tp, 1, &b->recvs[r]);
        if (b->send_live[r]) mlc_tp_abandon(&b->tp, 1, &b->sends[r]);
    }
    pthread_mutex_destroy(&b->lock);
    free(b->inbox);
    free(b->outbox);
    free(b->peers);
    free(b->recvs);
    free(b->sends);
    free(b->recv_live);
    free(b->send_live);
    free(b);
}

void mlc_waits_set_limit(mlc_waits *b, double seconds) {
    if (b) atomic_store(&b->limit, seconds > 0 ? seconds : 0);
}

void mlc_waits_caller(mlc_waits *b, int delta) {
    if (b) atomic_fetch_add(&b->callers, delta);
}

/* ---- under the lock ---- */

static void post_receive(mlc_waits *b, int r) {
    b->recv_live[r] = mlc_tp_irecv(&b->tp, &b->inbox[r], sizeof(notice), r, MLC_WAITS_TAG, &b->recvs[r]) == MLC_OK;
}

/* Take every notice that came; the latest of each peer counts. */
static void collect(mlc_waits *b) {
    for (int r = 0; r < b->tp.size; r++) {
        int done = 0;
        while (b->recv_live[r] && mlc_tp_testall(&b->tp, 1, &b->recvs[r], &done) == MLC_OK && done) {
            b->peers[r] = b->inbox[r];
            post_receive(b, r);
        }
    }
}

static int stuck_now(mlc_waits *b) { return b->waits && atomic_load(&b->callers) > 0; }

/* Tell every peer whether this rank is stuck, and on what. Notices are small (eager): a send
 * completes without its peer; the previous one to a peer is finished first, so that notices
 * from one rank arrive in order and none is lost. */
static void announce(mlc_waits *b, int stuck) {
    const double now = mlc_now();
    notice mine = {stuck, 0, stuck ? now - b->waits->since : 0, ""};
    if (stuck) memcpy(mine.what, b->waits->what, sizeof mine.what);
    b->peers[b->tp.rank] = mine;
    for (int r = 0; r < b->tp.size; r++) {
        if (r == b->tp.rank) continue;
        if (b->send_live[r] && mlc_tp_waitall(&b->tp, 1, &b->sends[r]) != MLC_OK)
            mlc_tp_abandon(&b->tp, 1, &b->sends[r]);
        b->outbox[r] = mine;
        b->send_live[r] = mlc_tp_isend(&b->tp, &b->outbox[r], sizeof(notice), r, MLC_WAITS_TAG, &b->sends[r]) == MLC_OK;
    }
    b->announced = stuck;
}

static int same_wait(const notice *x, const notice *y) { return !strcmp(x->what, y->what); }

/* "ranks 0-17 in team 0 request 1 (...); ranks 18-33 in team 1 request 1 (...)": ranks
 * that wait in the same place grouped, runs of them as ranges. */
static void describe_all(mlc_waits *b, char *buf, size_t len) {
    size_t off = 0;
    const int n = b->tp.size;
    for (int r = 0, groups = 0; r < n; r++) {
        int leader = 1;
        for (int q = 0; q < r && leader; q++) leader = !same_wait(&b->peers[q], &b->peers[r]);
        if (!leader) continue;
        int count = 0;
        for (int q = r; q < n; q++) count += same_wait(&b->peers[q], &b->peers[r]);
        mlc_append(buf, len, &off, "%s%s ", groups++ ? "; " : "", count == 1 ? "rank" : "ranks");
        for (int q = r, runs = 0; q < n;) {
            if (!same_wait(&b->peers[q], &b->peers[r])) {
                q++;
                continue;
            }
            int end = q;
            while (end + 1 < n && same_wait(&b->peers[end + 1], &b->peers[r])) end++;
            if (end == q) mlc_append(buf, len, &off, "%s%d", runs++ ? ", " : "", q);
            else mlc_append(buf, len, &off, "%s%d-%d", runs++ ? ", " : "", q, end);
            q = end + 1;
        }
        mlc_append(buf, len, &off, " in %s", b->peers[r].what);
    }
}

static void deadlock(mlc_waits *b, double limit) {
    char text[4096];
    describe_all(b, text, sizeof text);
    b->aborting = 1;
    /* One fprintf per line, so that lines of ranks sharing a terminal do not interleave. */
    fprintf(stderr,
            "ml_comm: rank %d: deadlock: every rank has waited inside ml_comm for requests the others "
            "have not made, for at least %g s (ML_COMM_DEADLOCK_SECONDS): %s. Every rank must call each "
            "team in the same order; aborting the job\n",
            b->tp.rank, limit, text);
    fflush(stderr);
    struct timespec pause = {1, 0}; /* let the other ranks say where they wait too */
    nanosleep(&pause, NULL);
    if (b->abort_job) b->abort_job(b->abort_arg, MLC_DEADLOCK_EXIT_CODE);
}

static void judge(mlc_waits *b, double limit) {
    const double now = mlc_now();
    int all = b->announced;
    for (int r = 0; r < b->tp.size && all; r++) all = b->peers[r].stuck;
    if (!all) {
        b->all_stuck_since = 0;
        return;
    }
    if (b->all_stuck_since == 0) b->all_stuck_since = now;
    if (now - b->waits->since >= limit && now - b->all_stuck_since >= limit / 4) deadlock(b, limit);
}

/* ---- called from the waits ---- */

void mlc_waits_poll(mlc_waits *b, mlc_wait *w) {
    const double limit = b ? atomic_load(&b->limit) : 0;
    if (limit <= 0 || b->tp.size < 2) return;
    const double now = mlc_now();
    if (w->since == 0) w->since = now; /* the wait's clock starts at its first look */
    if (now - w->since < limit / 4) return;
    if (pthread_mutex_trylock(&b->lock)) return; /* another thread is at it */
    if (!w->registered) {
        w->describe(w->arg, w->what, sizeof w->what);
        mlc_wait **tail = &b->waits;
        while (*tail) tail = &(*tail)->next;
        *tail = w;
        w->next = NULL;
        w->registered = 1;
    }
    if (!b->posted) {
        for (int r = 0; r < b->tp.size; r++)
            if (r != b->tp.rank) post_receive(b, r);
        b->posted = 1;
    }
    collect(b);
    const int stuck = stuck_now(b);
    if (stuck != b->announced) announce(b, stuck);
    if (!b->aborting) judge(b, limit);
    pthread_mutex_unlock(&b->lock);
}

void mlc_waits_leave(mlc_waits *b, mlc_wait *w) {
    if (!b || !w->registered) return;
    pthread_mutex_lock(&b->lock);
    for (mlc_wait **link = &b->waits; *link; link = &(*link)->next)
        if (*link == w) {
            *link = w->next;
            break;
        }
    w->registered = 0;
    if (b->announced && !stuck_now(b)) announce(b, 0);
    pthread_mutex_unlock(&b->lock);
}
