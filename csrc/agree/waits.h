/* The job's long waits: whether every rank waits inside ml_comm for requests that the
 * others have not made (a deadlock: two teams called in another order on another rank),
 * told across the ranks only once some wait is long (waits.c). */
#ifndef MLC_WAITS_H
#define MLC_WAITS_H

#include <pthread.h>
#include <stdatomic.h>

#include "transport/transport.h"

/* Minutes, not the stall abort's half hour: a deadlock idles every node of the job. */
#define MLC_DEFAULT_DEADLOCK_SECONDS 120.0
/* What a wait says of itself to the other ranks: "team 0 request 3 (average of ...)". */
#define MLC_WAIT_TEXT 128

/* One agreement exchange of this rank that waits for peers to reach it. What it is
 * ("team 0 request 3 (average of ...)") is written only once it is long, by describe. */
typedef struct mlc_wait {
    struct mlc_wait *next; /* the board's list, while registered */
    int registered;
    double since; /* the wait's first look (mlc_now); 0 before it */
    void (*describe)(const void *arg, char *buf, size_t len);
    const void *arg;
    char what[MLC_WAIT_TEXT];
} mlc_wait;

typedef struct mlc_waits mlc_waits;

/* On a communicator of its own (tp is copied); abort_job ends the job. NULL: no memory. */
mlc_waits *mlc_waits_create(const mlc_tp *tp, void (*abort_job)(void *arg, int exit_code), void *abort_arg);
/* Cancels what is posted (while the transport works), then frees. */
void mlc_waits_destroy(mlc_waits *b);
/* The deadlock limit in seconds; 0: never. */
void mlc_waits_set_limit(mlc_waits *b, double seconds);
/* A caller thread starts (+1) or ends (-1) a blocking wait inside ml_comm: while none is
 * blocked, this rank is busy outside (computing, evaluating) and never deadlocked. */
void mlc_waits_caller(mlc_waits *b, int delta);
/* From an exchange's wait, every few polls: past a quarter of the limit the wait is
 * registered, the rank tells the others whether it is stuck (a caller blocked, an exchange
 * waiting), and once every rank has been stuck long enough, every rank names every rank's
 * wait and the job is aborted. */
void mlc_waits_poll(mlc_waits *b, mlc_wait *w);
/* The exchange's wait ended (before w goes out of scope). */
void mlc_waits_leave(mlc_waits *b, mlc_wait *w);

#endif
