/* Transport: point-to-point messages between the ranks of one communicator, and
 * the waits on them. Algorithms and the agreement exchange move bytes only
 * through this interface; it knows nothing of teams, requests or algorithms.
 * Two implementations: MPI (mpi.c, the product) and loopback (loopback.c, ranks
 * as threads of one process, for tests without MPI). */
#ifndef MLC_TRANSPORT_H
#define MLC_TRANSPORT_H

#include "base/base.h"

/* The largest tag every MPI accepts (the standard's least MPI_TAG_UB): the loopback
 * transport refuses others, so that its tests see what MPI would. */
#define MLC_TP_TAG_UB 32767

/* A posted send or receive, owned by the transport that posted it. */
typedef struct mlc_tp_req {
    uint64_t opaque[2];
} mlc_tp_req;

typedef struct mlc_tp mlc_tp;

typedef struct mlc_tp_ops {
    int (*isend)(mlc_tp *tp, const void *buf, int64_t bytes, int dest, int tag, mlc_tp_req *req);
    int (*irecv)(mlc_tp *tp, void *buf, int64_t bytes, int src, int tag, mlc_tp_req *req);
    /* *done = 1 once all n are complete; completed ones become inactive. */
    int (*testall)(mlc_tp *tp, int n, mlc_tp_req *reqs, int *done);
    /* *index: one that completed now (it becomes inactive), -1 if none yet, or
     * -2 when none is active. */
    int (*testany)(mlc_tp *tp, int n, mlc_tp_req *reqs, int *index);
    /* After an error: cancel what is still posted and make all n inactive. */
    void (*abandon)(mlc_tp *tp, int n, mlc_tp_req *reqs);
    /* *done = 1 when req completed (or is inactive), without completing it: for
     * messages that say what a stalled wait waits for. */
    void (*peek)(mlc_tp *tp, mlc_tp_req *req, int *done);
} mlc_tp_ops;

/* Called on every poll of a wait (poll counts from 0 in each wait): how a higher
 * layer (the stall watchdog) looks at the clock without the transport knowing it. */
typedef void (*mlc_tp_progress)(void *arg, const mlc_tp *tp, int64_t poll);

struct mlc_tp {
    const mlc_tp_ops *ops;
    void *impl;    /* the implementation's endpoint (an MPI_Comm, a loopback rank) */
    int rank, size;
    char *message; /* MLC_MSG_LEN bytes for the text of an error */
    mlc_tp_progress progress;
    void *progress_arg;
    int recv_peer, send_peer; /* last peers posted to while a wait is due; -1: none */
    /* 1: waits yield between polls but never sleep (wait.c): a thread blocked in its
     * caller's collective, with nothing else to do. */
    int never_sleeps;
};

void mlc_tp_set_progress(mlc_tp *tp, mlc_tp_progress fn, void *arg);

int mlc_tp_isend(mlc_tp *tp, const void *buf, int64_t bytes, int dest, int tag, mlc_tp_req *req);
int mlc_tp_irecv(mlc_tp *tp, void *buf, int64_t bytes, int src, int tag, mlc_tp_req *req);
int mlc_tp_waitall(mlc_tp *tp, int n, mlc_tp_req *reqs);
int mlc_tp_waitany(mlc_tp *tp, int n, mlc_tp_req *reqs, int *index);
/* Without waiting: *done = 1 once all n completed (they become inactive). */
int mlc_tp_testall(mlc_tp *tp, int n, mlc_tp_req *reqs, int *done);
/* Both posted, then waited for; a negative dest or src leaves that side out. */
int mlc_tp_sendrecv(mlc_tp *tp, const void *sbuf, int64_t sbytes, int dest, void *rbuf,
                    int64_t rbytes, int src, int tag);
int mlc_tp_send(mlc_tp *tp, const void *buf, int64_t bytes, int dest, int tag);
int mlc_tp_recv(mlc_tp *tp, void *buf, int64_t bytes, int src, int tag);
void mlc_tp_abandon(mlc_tp *tp, int n, mlc_tp_req *reqs);
int mlc_tp_peek(mlc_tp *tp, mlc_tp_req *req); /* 1: completed or inactive */

#endif
