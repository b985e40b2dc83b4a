/* Who reached a stalled request: the agreement exchange along a tree knows only
 * its current partner, so a stalled wait asks every rank (arrivals.c). */
#ifndef MLC_ARRIVALS_H
#define MLC_ARRIVALS_H

#include "transport/transport.h"

typedef struct mlc_arrivals {
    int posted;         /* the notice receives are posted (after a first stall) */
    int64_t *heard;     /* per rank: the latest request it said it reached; -1 none */
    int64_t *inbox;     /* one notice per peer */
    int64_t *outbox;    /* this rank's notice, per peer (a send's buffer stays put) */
    mlc_tp_req *reqs;   /* 2 (size - 1): receives, then sends */
    char *live;         /* per entry of reqs: posted and not yet completed */
} mlc_arrivals;

int mlc_arrivals_open(mlc_arrivals *ar, int size);
/* Cancel what is still posted (while the transport works), then free. */
void mlc_arrivals_cancel(mlc_arrivals *ar, mlc_tp *tp);
void mlc_arrivals_close(mlc_arrivals *ar);
/* Tell every peer this rank waits in request seq (once per stalled request). */
void mlc_arrivals_announce(mlc_arrivals *ar, mlc_tp *tp, int64_t seq);
/* Take the notices that came, then "rank 2 to reach it" or "ranks 1, 3 to reach
 * it": the peers from which no notice of seq (or later) came. */
void mlc_arrivals_describe(mlc_arrivals *ar, mlc_tp *tp, int64_t seq, char *buf, size_t len);

/* A notice from `peer` of exchange `round` that the caller received itself (a rank that
 * never posted the receives: the departure check). */
void mlc_arrivals_heard(mlc_arrivals *ar, int peer, int64_t round);
/* For a rank about to leave: a peer whose notice says it waits in exchange `round` or
 * later, one this rank never entered; -1 none. */
int mlc_arrivals_waiting_in(mlc_arrivals *ar, mlc_tp *tp, int64_t round);

#endif
