/* Stall watchdog: a wait that takes too long says what it is waiting for, and
 * past the abort limit ends the job. Used by the agreement exchange, by the
 * transport (as its progress hook) and by the team layer's own waits. */
#ifndef MLC_WATCHDOG_H
#define MLC_WATCHDOG_H

#include <pthread.h>

#include "transport/transport.h"

#define MLC_DEFAULT_STALL_WARN_SECONDS 60.0

/* A team's limits and how to end the job. */
typedef struct mlc_watchdog {
    int rank, team_id;
    double warn, abort; /* seconds; 0: never */
    void (*abort_job)(void *arg, int exit_code);
    void *abort_arg;
} mlc_watchdog;

/* Writes what is waited in or for ("rank 1 to reach it") into buf. */
typedef void (*mlc_describe_fn)(const void *arg, char *buf, size_t len);

/* One wait in progress. mlc_stall_begin before each wait; zero polls. */
typedef struct mlc_stall {
    const mlc_watchdog *dog;
    int64_t seq; /* the request's number in the team's queue */
    mlc_describe_fn describe_request, describe_wait;
    const void *request, *wait_arg;
    int64_t polls;
    double start, next_warn;
} mlc_stall;

void mlc_stall_begin(mlc_stall *s, const mlc_watchdog *dog, int64_t seq,
                     mlc_describe_fn describe_request, const void *request,
                     mlc_describe_fn describe_wait, const void *wait_arg);
/* Every iteration of a polling wait: reads the clock every few polls. */
void mlc_stall_poll(mlc_stall *s);
/* pthread_cond_wait with the same warnings; the mutex is held while describing. */
void mlc_stall_cond_wait(mlc_stall *s, pthread_cond_t *cv, pthread_mutex_t *mutex);
/* The transport's progress hook (arg: an mlc_stall): names the peers the
 * transport last posted to. A wait that ends resets the stall's clock. */
void mlc_stall_transport_progress(void *arg, const mlc_tp *tp, int64_t poll);

#endif
