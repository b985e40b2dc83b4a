/* Reliability checks, shared by team.c, execute.c, group.c and the transport:
 *   signature.c  ranks agree on each request (and, optionally, that its input is
 *                finite) before any of its data moves; small allreduces ride along;
 *   finite.c     the NaN/Inf scan;
 *   watchdog.c   stall warnings and the stall abort, and request descriptions.
 * Everything hangs off the team (struct mlc_guard): no globals. */
#ifndef MLC_CHECKS_H
#define MLC_CHECKS_H

#include "core.h"

#define MLC_DEFAULT_STALL_WARN_SECONDS 60.0
/* Below MPICH's eager limit for shared memory (a message of 8 KiB goes slower),
 * signature included; benchmarks/RESULTS.md "Agreement check". */
#define MLC_DEFAULT_DIRECT_BYTES 4096

/* A team's checking state and settings (team->guard). */
typedef struct mlc_guard {
    int layout; /* compare signatures (mlc_team_set_checks; on by default) */
    int finite; /* scan inputs for NaN/Inf (off by default) */
    int id;     /* the team's number in messages */
    double stall_warn, stall_abort; /* seconds; 0: never */

    MPI_Comm comm;        /* a dup carrying signatures only */
    pthread_mutex_t lock; /* held by the one thread exchanging, one request at a time */
    mlc_request *head, *tail; /* registered and not yet exchanged, in seq order; team lock */
    char *slots;          /* one per rank: signature, then room for a direct allreduce's input */
    size_t slot_bytes;
    int64_t direct_bytes; /* allreduces up to this size travel with their signature */
    char *acc;            /* direct_bytes: where a direct allreduce is summed */
    MPI_Request *reqs;    /* 2 (size - 1) */
    _Atomic int stop_requested; /* this rank asked to stop: every later signature says so */
    _Atomic int64_t stop_seq;   /* first request whose verdict carried a stop; -1: none yet */
    int drop_left; /* parts of a failed multi-request call to fail without exchanging */
    int drop_status;
    char drop_message[MLC_MSG_LEN];
} mlc_guard;

/* Per request: where it stands in the check (req->check_state). */
enum { MLC_CHECK_NONE = 0, MLC_CHECK_PENDING = 1, MLC_CHECK_DONE = 2 };

/* ---- signature.c ---- */
void mlc_guard_init(mlc_team *team); /* defaults; cannot fail; before anything else */
int mlc_guard_open(mlc_team *team, char *err, size_t errlen); /* buffers and communicator */
void mlc_guard_destroy(mlc_team *team); /* also after a failed or missing open */
/* Whether req takes part in the check (exchange, or at one rank the finite scan). */
int mlc_guard_wants(const mlc_team *team, const mlc_request *req);
/* Under the team lock, after req->seq is set: queue req for the exchange. */
void mlc_guard_register(mlc_team *team, mlc_request *req);
/* The verdict on req: MLC_OK, or an error with its text copied into message.
 * The first thread that needs a verdict runs the exchanges of every registered
 * request up to req, in order; the others wait for it. After MLC_OK,
 * req->done_by_check says whether the exchange already reduced it (direct). */
int mlc_guard_verdict(mlc_team *team, mlc_request *req, char *message);

/* ---- finite.c ---- */
/* 1 when some of the n elements is NaN or +-Inf (floating dtypes only). */
int mlc_has_nonfinite(const void *buf, int64_t n, int dtype);
int mlc_dtype_is_float(int dtype);
const char *mlc_dtype_name(int dtype);

/* ---- watchdog.c ---- */
/* One wait in progress: when it started, when to warn next. Zero-initialise. */
typedef struct mlc_stall {
    int64_t polls;
    double start, next_warn;
} mlc_stall;
/* Writes what the wait is waiting for ("rank 1 to reach it") into buf. */
typedef void (*mlc_stall_describe)(const void *arg, char *buf, size_t len);
/* Call on every iteration of a polling wait: reads the clock every few polls and,
 * past the team's limits, warns on stderr or aborts the job. */
void mlc_stall_poll(mlc_stall *s, const mlc_team *team, const mlc_request *req,
                    mlc_stall_describe describe, const void *arg);
/* pthread_cond_wait with the same warnings; the mutex is held while describing. */
void mlc_stall_cond_wait(mlc_stall *s, pthread_cond_t *cv, pthread_mutex_t *mutex,
                         const mlc_team *team, const mlc_request *req,
                         mlc_stall_describe describe, const void *arg);
/* "average of 3 float32 tensors, 1000 elements" and the like. */
void mlc_describe_request(const mlc_request *req, char *buf, size_t len);

/* What a thread moving a request's data waits for (mlc_xfer.watch): the
 * transport notes the last peer of each direction as it posts messages. */
struct mlc_watch {
    const mlc_team *team;
    const mlc_request *req;
    int recv_peer, send_peer; /* -1: none pending */
};
void mlc_watch_init(struct mlc_watch *w, const mlc_team *team, const mlc_request *req);
/* For the transport's polling loops. */
void mlc_watch_poll(struct mlc_watch *w, mlc_stall *s);

#endif
