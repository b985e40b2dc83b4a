/* Team internals shared by team.c (threads, queue, requests) and execute.c
 * (how one thread carries out its part of a request). */
#ifndef MLC_TEAM_H
#define MLC_TEAM_H

#include <stdatomic.h>

#include "core.h"
#include "checks.h"

/* Segments a thread keeps in flight in one ring call (see allreduce_ring.c). */
#define MLC_RING_BATCH 2
/* Mid-sized requests are cut finer than chunk_bytes to keep every thread busy,
 * down to this size, below which per-message costs dominate. */
#define MLC_MIN_SEGMENT_BYTES (32 * 1024)

enum mlc_request_kind { MLC_KIND_ALLREDUCE, MLC_KIND_BROADCAST };

struct mlc_request {
    mlc_team *team;
    uint64_t seq; /* position in the team's queue: every thread takes requests in this order */
    int kind, dtype, op, root, algorithm;
    int ntensors;
    mlc_tensor *tensors; /* copy of the caller's list */
    int64_t *starts;     /* starts[i]: element offset of tensor i in the concatenation */
    int heap;            /* tensors/starts/the request itself were malloc'ed */
    int64_t total;       /* elements */
    int workers_left;
    _Atomic int finished; /* set last; waiters may poll it without the lock */
    int detached; /* nobody waits: the team frees it when done */
    int status;
    char message[MLC_MSG_LEN];
    mlc_callback callback;
    void *user_data;
    double submitted_at;
    double ready_at; /* its last input arrived (a group's last tensor; else submission) */
    mlc_request *next;

    /* Keyed groups (group.c): tensors arrive one by one after the request is queued. */
    int is_group;
    int64_t key;
    int narrived, next_missing;   /* under the team lock */
    unsigned char *arrived;       /* per tensor */
    _Atomic int64_t ready_elems;  /* elements [0, ready_elems) may be read */
    _Atomic int *segs_left;       /* per tensor: segments still to reduce; NULL: no per-tensor done */
    mlc_callback *tensor_done;
    void **tensor_user;
    mlc_request *next_open;

    /* The agreement check (signature.c): the verdict is set before any data moves. */
    int part, nparts;         /* of the caller's multi-request call; 0 and 1 otherwise */
    int call_dtypes;          /* bit d: the call has a part of dtype d (0: not said) */
    int stop_asked;           /* the verdict: some rank asked to stop (mlc_team_request_stop) */
    _Atomic int check_state;  /* MLC_CHECK_*; DONE publishes the fields below */
    int check_status;
    int direct_ok;     /* may travel with its signature (MLC_ALG_AUTO, not a group) */
    int done_by_check; /* a direct allreduce: the exchange already reduced it */
    char check_message[MLC_MSG_LEN];
    int nonfinite_ranks, nonfinite_rank, nonfinite_tensor; /* after MLC_ERR_NONFINITE */
    mlc_request *next_check;  /* registered requests, under the team lock */
};

typedef struct mlc_worker {
    mlc_team *team;
    int index;
    pthread_t thread;
    MPI_Comm comm; /* this thread's own dup */
    char *scratch;
    int64_t scratch_bytes;
    uint64_t last_seq; /* last request this thread has finished */
    char message[MLC_MSG_LEN];
} mlc_worker;

struct mlc_team {
    mlc_context *ctx;
    int nthreads;
    int64_t chunk_bytes;     /* segment size; a multiple of 8 so every dtype tiles it */
    int64_t window_segments; /* fusion buffer size in segments */
    char *fusion;
    int algorithm;
    int64_t latency_bytes; /* below: recursive doubling (under MLC_ALG_AUTO) */
    int64_t inline_bytes;  /* up to: blocking calls run on the caller's thread */

    pthread_mutex_t lock; /* guards the queue, request state and stats */
    pthread_cond_t work_cv, done_cv;
    mlc_request *head, *tail;
    mlc_request *open_groups; /* keyed groups still waiting for tensors */
    pthread_cond_t ready_cv;  /* a tensor of a group arrived */
    uint64_t next_seq;
    _Atomic uint64_t published_seq; /* lets idle threads spin briefly without the lock */
    int shutting_down;
    mlc_worker *workers;

    /* Blocking small operations run on the caller's thread, on their own communicator. */
    pthread_mutex_t caller_lock;
    MPI_Comm caller_comm;
    char *caller_pack, *caller_scratch;
    int64_t caller_pack_bytes, caller_scratch_bytes;
    char caller_message[MLC_MSG_LEN];

    mlc_team_stats stats;
    int64_t report_every; /* mlc_team_set_report */
    mlc_report_fn report_fn;
    void *report_user;
    char last_error[MLC_MSG_LEN];
    mlc_guard guard; /* agreement checks and stall limits (checks.h) */

    mlc_event *events; /* timeline; NULL when off */
    int64_t events_capacity;
    _Atomic int64_t events_used;
};

/* timeline.c */
void mlc_timeline_record(mlc_team *team, int kind, int thread, int64_t request, int64_t detail,
                         int64_t bytes, double start, double end);

/* team.c */
void mlc_queue_request(mlc_team *team, mlc_request *req); /* under team->lock */
void mlc_free_request(mlc_request *req);
int64_t mlc_request_segment_elems(const mlc_team *team, const mlc_request *req);

/* group.c */
int mlc_group_wait_ready(mlc_request *req, int64_t end); /* MLC_ERR_STATE on shutdown */
int mlc_group_wait_all(mlc_request *req); /* every tensor arrived; MLC_ERR_STATE on shutdown */
void mlc_group_segment_done(mlc_request *req, int64_t start, int64_t count);
void mlc_group_fail_remaining(mlc_request *req);

/* execute.c */
int mlc_execute_part(mlc_worker *w, mlc_request *req);
int mlc_execute_inline(mlc_team *team, mlc_request *req);
void mlc_copy_range(const mlc_request *req, int64_t start, int64_t count, char *fused, int to_fused);

#endif
