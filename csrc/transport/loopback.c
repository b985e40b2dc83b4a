/* Loopback transport: ranks are threads of one process sharing one mailbox table.
 *
 * A send copies its bytes at once (eager): into a receive already posted for it
 * (same source and tag, oldest first), else into the destination's queue of
 * unexpected messages. A receive takes the oldest queued message that matches,
 * else stays posted. So messages between two ranks with one tag never overtake
 * each other, as in MPI. One mutex guards the table; waits poll (transport/wait.c).
 * A message longer than its receive fails the receive, as MPI truncation does, and a tag
 * beyond MLC_TP_TAG_UB fails as MPI would. Any number of requests may be outstanding and
 * tested at once, as over MPI (mpi.c tests them in windows). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loopback.h"

typedef struct message {
    int src, tag;
    int64_t bytes;
    struct message *next;
    char data[];
} message;

typedef struct posted {
    int src, tag;
    void *buf;
    int64_t capacity;
    int done, status;
    struct posted *next;
} posted;

typedef struct endpoint {
    mlc_loopback *lb;
    int rank;
    message *queue;   /* unexpected, oldest first */
    posted *receives; /* posted, oldest first */
    int fail_after;   /* sends left before they fail; -1: never */
} endpoint;

struct mlc_loopback {
    int size;
    pthread_mutex_t lock;
    endpoint *ranks;
};

mlc_loopback *mlc_loopback_create(int size) {
    mlc_loopback *lb = calloc(1, sizeof *lb);
    if (!lb) return NULL;
    lb->size = size;
    lb->ranks = calloc(size, sizeof *lb->ranks);
    if (!lb->ranks) {
        free(lb);
        return NULL;
    }
    for (int r = 0; r < size; r++) lb->ranks[r] = (endpoint){lb, r, NULL, NULL, -1};
    pthread_mutex_init(&lb->lock, NULL);
    return lb;
}

void mlc_loopback_destroy(mlc_loopback *lb) {
    for (int r = 0; r < lb->size; r++) {
        for (message *m = lb->ranks[r].queue, *next; m; m = next) {
            next = m->next;
            free(m);
        }
        for (posted *p = lb->ranks[r].receives, *next; p; p = next) {
            next = p->next;
            free(p);
        }
    }
    pthread_mutex_destroy(&lb->lock);
    free(lb->ranks);
    free(lb);
}

static endpoint *self(const mlc_tp *tp) { return tp->impl; }

static void deliver(posted *p, const void *data, int64_t bytes) {
    p->done = 1;
    p->status = bytes <= p->capacity ? MLC_OK : MLC_ERR_MPI;
    if (p->status == MLC_OK && bytes) memcpy(p->buf, data, bytes);
}

/* MPI's limits: a tag beyond what every MPI accepts fails as MPI would fail it. */
static int bad_tag(mlc_tp *tp, int tag, const char *what) {
    if (tag >= 0 && tag <= MLC_TP_TAG_UB) return 0;
    snprintf(tp->message, MLC_MSG_LEN, "loopback %s: tag %d outside 0..%d, the tags every MPI accepts", what, tag,
             MLC_TP_TAG_UB);
    return 1;
}

static int lb_isend(mlc_tp *tp, const void *buf, int64_t bytes, int dest, int tag, mlc_tp_req *req) {
    endpoint *me = self(tp);
    mlc_loopback *lb = me->lb;
    memset(req, 0, sizeof *req); /* sends complete at once */
    if (bad_tag(tp, tag, "send")) return MLC_ERR_MPI;
    pthread_mutex_lock(&lb->lock);
    if (me->fail_after == 0) {
        pthread_mutex_unlock(&lb->lock);
        snprintf(tp->message, MLC_MSG_LEN, "loopback send to rank %d failed (injected)", dest);
        return MLC_ERR_MPI;
    }
    if (me->fail_after > 0) me->fail_after--;
    endpoint *to = &lb->ranks[dest];
    for (posted *p = to->receives; p; p = p->next) {
        if (p->done || p->src != me->rank || p->tag != tag) continue;
        deliver(p, buf, bytes);
        pthread_mutex_unlock(&lb->lock);
        return MLC_OK;
    }
    message *m = malloc(sizeof *m + (bytes ? bytes : 1));
    if (!m) {
        pthread_mutex_unlock(&lb->lock);
        return MLC_ERR_NOMEM;
    }
    *m = (message){me->rank, tag, bytes, NULL};
    if (bytes) memcpy(m->data, buf, bytes);
    message **tail = &to->queue;
    while (*tail) tail = &(*tail)->next;
    *tail = m;
    pthread_mutex_unlock(&lb->lock);
    return MLC_OK;
}

static int lb_irecv(mlc_tp *tp, void *buf, int64_t bytes, int src, int tag, mlc_tp_req *req) {
    endpoint *me = self(tp);
    if (bad_tag(tp, tag, "receive")) return MLC_ERR_MPI;
    posted *p = calloc(1, sizeof *p);
    if (!p) return MLC_ERR_NOMEM;
    *p = (posted){src, tag, buf, bytes, 0, MLC_OK, NULL};
    pthread_mutex_lock(&me->lb->lock);
    for (message **link = &me->queue; *link; link = &(*link)->next) {
        message *m = *link;
        if (m->src != src || m->tag != tag) continue;
        deliver(p, m->data, m->bytes);
        *link = m->next;
        free(m);
        break;
    }
    posted **tail = &me->receives;
    while (*tail) tail = &(*tail)->next;
    *tail = p;
    pthread_mutex_unlock(&me->lb->lock);
    req->opaque[0] = (uint64_t)(uintptr_t)p;
    return MLC_OK;
}

/* Under the lock: unlink and free a finished receive; its status. */
static int retire(endpoint *me, posted *p) {
    for (posted **link = &me->receives; *link; link = &(*link)->next) {
        if (*link != p) continue;
        *link = p->next;
        break;
    }
    int status = p->status;
    free(p);
    return status;
}

static posted *receive_of(const mlc_tp_req *req) { return (posted *)(uintptr_t)req->opaque[0]; }

static int lb_testall(mlc_tp *tp, int n, mlc_tp_req *reqs, int *done) {
    endpoint *me = self(tp);
    int rc = MLC_OK;
    pthread_mutex_lock(&me->lb->lock);
    *done = 1;
    for (int i = 0; i < n; i++) {
        posted *p = receive_of(&reqs[i]);
        if (!p) continue;
        if (!p->done) {
            *done = 0;
            continue;
        }
        if (retire(me, p) != MLC_OK) rc = MLC_ERR_MPI;
        reqs[i].opaque[0] = 0;
    }
    pthread_mutex_unlock(&me->lb->lock);
    if (rc) snprintf(tp->message, MLC_MSG_LEN, "loopback receive truncated a message");
    return rc;
}

static int lb_testany(mlc_tp *tp, int n, mlc_tp_req *reqs, int *index) {
    endpoint *me = self(tp);
    int active = 0, rc = MLC_OK;
    *index = -1;
    pthread_mutex_lock(&me->lb->lock);
    for (int i = 0; i < n && *index == -1; i++) {
        posted *p = receive_of(&reqs[i]);
        if (!p) continue;
        active = 1;
        if (!p->done) continue;
        rc = retire(me, p);
        reqs[i].opaque[0] = 0;
        *index = i;
    }
    pthread_mutex_unlock(&me->lb->lock);
    if (!active) *index = -2;
    if (rc) snprintf(tp->message, MLC_MSG_LEN, "loopback receive truncated a message");
    return rc;
}

static void lb_abandon(mlc_tp *tp, int n, mlc_tp_req *reqs) {
    endpoint *me = self(tp);
    pthread_mutex_lock(&me->lb->lock);
    for (int i = 0; i < n; i++) {
        posted *p = receive_of(&reqs[i]);
        if (p) retire(me, p);
        reqs[i].opaque[0] = 0;
    }
    pthread_mutex_unlock(&me->lb->lock);
}

static void lb_peek(mlc_tp *tp, mlc_tp_req *req, int *done) {
    endpoint *me = self(tp);
    pthread_mutex_lock(&me->lb->lock);
    posted *p = receive_of(req);
    *done = !p || p->done;
    pthread_mutex_unlock(&me->lb->lock);
}

static const mlc_tp_ops loopback_ops = {lb_isend, lb_irecv, lb_testall, lb_testany, lb_abandon, lb_peek};

void mlc_loopback_open(mlc_loopback *lb, int rank, mlc_tp *tp, char *message) {
    memset(tp, 0, sizeof *tp);
    tp->ops = &loopback_ops;
    tp->impl = &lb->ranks[rank];
    tp->rank = rank;
    tp->size = lb->size;
    tp->message = message;
    tp->recv_peer = tp->send_peer = -1;
}

int mlc_loopback_posted(mlc_loopback *lb, int rank) {
    int n = 0;
    pthread_mutex_lock(&lb->lock);
    for (posted *p = lb->ranks[rank].receives; p; p = p->next) n++;
    pthread_mutex_unlock(&lb->lock);
    return n;
}

int mlc_loopback_queued(mlc_loopback *lb, int rank) { return mlc_loopback_queued_tag(lb, rank, -1); }

int mlc_loopback_queued_tag(mlc_loopback *lb, int rank, int tag) {
    int n = 0;
    pthread_mutex_lock(&lb->lock);
    for (message *m = lb->ranks[rank].queue; m; m = m->next) n += tag < 0 || m->tag == tag;
    pthread_mutex_unlock(&lb->lock);
    return n;
}

void mlc_loopback_fail_sends(mlc_loopback *lb, int rank, int after) {
    pthread_mutex_lock(&lb->lock);
    lb->ranks[rank].fail_after = after;
    pthread_mutex_unlock(&lb->lock);
}
