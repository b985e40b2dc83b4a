/* Team layer: contexts, teams of persistent communication threads, requests and
 * keyed groups, and how a request is carried out. The top of the C core: it
 * calls plan/, agree/, algos/ and transport/, and nothing calls it but the
 * public API. Files: context.c, team.c (threads, queue, completion), request.c
 * (requests and the async/blocking entry points), group.c (keyed groups),
 * seal.c (a group's check, after its data, that no rank's step cancelled it),
 * execute.c (segments), departure.c, timeline.c, thread_cores.c (the threads' cores and
 * names). */
#ifndef MLC_TEAM_H
#define MLC_TEAM_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

#include "agree/agree.h"
#include "cuda/stage.h"
#include "plan/plan.h"
#include "transport/mpi.h"

/* The distinct calls of gradients the weights check tells apart (weights_check.c). */
#define MLC_WEIGHTS_CALLS 64

/* Groups remembered per team by their step (group.c): completed ones that no opener
 * claimed yet, and cancelled ones. */
#define MLC_UNCLAIMED_RING 16
#define MLC_CANCELLED_RING 64

struct mlc_context {
    MPI_Comm comm; /* dup of the user's communicator; teams dup it again */
    int rank;
    int size;
    /* The job's long waits (agree/waits.c), on a dup of its own; NULL at one rank. */
    MPI_Comm waits_comm;
    mlc_tp waits_tp;
    char waits_message[MLC_MSG_LEN];
    mlc_waits *waits;
};

typedef struct mlc_group mlc_group;

/* Ends the whole job (MPI_Abort on MPI_COMM_WORLD): the watchdogs' last resort (context.c). */
void mlc_abort_job(void *unused, int exit_code);

/* What this rank's last request on a team was, for messages (mlc_team_last_request). */
typedef struct mlc_request_note {
    int64_t seq; /* 0: none yet */
    int kind, dtype, op, root, ntensors, is_group;
    int64_t total, key, row_elements;
} mlc_request_note;

/* The team's settings a request was submitted under, signed: ranks must agree on them. */
typedef struct mlc_request_schedule {
    int compression;    /* the team's MLC_COMPRESSION_* */
    int team_algorithm; /* config_team's alg, ksteps and max_steps (mlc_team_set_schedule) */
    int64_t ksteps, max_steps;
} mlc_request_schedule;

/* A collective of rows (rows.c): what its algorithm moves, and what its check compares
 * and carries beyond a reduction's layout. */
typedef struct mlc_request_rows {
    mlc_rows_call call;
    int sizes_vary;            /* signed: its sizes differ by rank, row_elements is compared */
    int64_t row_elements;
    int row_ndim;              /* and the rows' shape (the caller's, for a blocking call) */
    const int64_t *row_shape;
    int64_t sizes_count;       /* sizes the check carries (mlc_sign_input), with plan.direct */
    const int64_t *sizes_in;
    int64_t *sizes_out;
    const void *rows_in;       /* an allgather's rows, carried with its sizes */
    int64_t rows_bytes;
    char *rows_out;
    int covered;               /* an allgather's data, checked with its counts request */
} mlc_request_rows;

/* What went wrong on this rank: its own arguments and a cancelled step (both signed), the
 * first value found beyond float16's range on the wire. */
typedef struct mlc_request_fault {
    int bad_args; /* MLC_BAD_*: the caller's arguments failed its check */
    int64_t bad_detail[2];
    int cancelled;            /* a keyed group this rank's failed step cancelled (group.c) */
    int overflow_tensor;      /* MLC_ERR_OVERFLOW: the first tensor found Inf/NaN; -1 */
    int64_t overflow_element; /* and the element in it */
    /* NaN/Inf the caller found in its input beforehand (a device call's scan, staged.c): the
     * first such tensor and how many, signed in place of the request's own scan; 0: none. */
    int scanned_tensor, scanned_count;
} mlc_request_fault;

/* How a request ends, and who is told. */
typedef struct mlc_request_end {
    int workers_left;
    _Atomic int finished; /* set last; waiters may poll it without the lock */
    int detached;         /* nobody waits: the team frees it when done */
    int status;
    char message[MLC_MSG_LEN];
    mlc_callback callback;
    void *user_data;
    double submitted_at;
    double ready_at; /* its last input arrived (a group's last tensor; else submission) */
} mlc_request_end;

struct mlc_request {
    mlc_team *team;
    uint64_t seq; /* position in the team's queue: every thread takes requests in this order */
    int heap;     /* tensors/starts/the request itself were malloc'ed */
    /* What to reduce or move, and how (the plan, made once, at submission: plan/plan.c). */
    int kind, dtype, op, root;
    int part, nparts; /* of the caller's multi-request call; 0 and 1 otherwise */
    int call_dtypes;  /* bit d: the call has a part of dtype d (0: not said) */
    int ntensors;
    mlc_tensor *tensors; /* copy of the caller's list */
    int64_t *starts;     /* starts[i]: element offset of tensor i in the segment layout */
    int64_t total;       /* elements */
    int64_t span;        /* the layout's length: total, plus gaps when plan.aligned */
    mlc_plan plan;
    mlc_request_schedule sched;
    mlc_call_id call;     /* where its caller stands (mlc_call_of); signed */
    mlc_request_rows rows;
    mlc_group *group;     /* a keyed group's arrivals (group.c); NULL otherwise */
    int lanes_running;    /* lanes not yet through its data (seal.c), under the team lock */
    mlc_request_fault fault;
    mlc_agreement agreement; /* the agreement check's state (agree/) */
    mlc_request_end end;
    mlc_request *next;
};

typedef struct mlc_worker {
    mlc_team *team;
    int index;
    pthread_t thread;
    MPI_Comm comm; /* this thread's own dup */
    mlc_tp tp;
    char *scratch;
    int64_t scratch_bytes;
    uint64_t last_seq; /* last request this thread has finished */
    int64_t slice_ns;  /* the time slice it asked the scheduler for (0: none asked) */
    char message[MLC_MSG_LEN];
} mlc_worker;

/* A team's settings: what the plan reads for each request (under the team's lock). */
typedef struct mlc_team_config {
    int64_t chunk_bytes;     /* segment size; a multiple of 8 so every dtype tiles it */
    int64_t window_segments; /* fusion buffer size in segments */
    int algorithm;
    int64_t latency_bytes;      /* below: recursive doubling (under MLC_ALG_AUTO) */
    int64_t rabenseifner_bytes; /* below (and from latency_bytes): Rabenseifner, see plan.c */
    int64_t inline_bytes;       /* up to: blocking calls run on the caller's thread */
    int64_t submit_bytes;       /* up to: a one-tensor group is reduced by its submit */
    int compression;            /* MLC_COMPRESSION_*: 16-bit values on the ring's wire */
    int64_t ksteps, max_steps;  /* config_team's schedule: only signed (ranks must agree) */
    _Atomic int64_t thread_slice_ns; /* the threads ask for it before their next request */
} mlc_team_config;

/* Blocking operations run on the caller's thread, on a communicator of their own, under
 * its lock. */
typedef struct mlc_team_caller {
    pthread_mutex_t lock;
    MPI_Comm comm;
    mlc_tp tp;
    char *pack, *scratch;
    int64_t pack_bytes, scratch_bytes;
    char message[MLC_MSG_LEN];
    mlc_buffer rows_staging; /* collectives of rows (rows.c) */
    /* A digest of the counts, dtype and row length of the last allgather whose counts
     * request the agreement checked and whose data has not moved yet (rows.c); 0: none.
     * Under the team's lock. */
    uint64_t rows_agreed;
    /* A ring's first round sent ahead of its check (ahead.c): its buffer (one ring piece,
     * kept for the team's life) and whether it is posted or agreed and waiting for its ring. */
    mlc_ring_ahead ahead;
    int ahead_state;
} mlc_team_caller;

/* A keyed group of one step (group.c). */
typedef struct mlc_group_step {
    int64_t key, step;
} mlc_group_step;

/* Keyed groups (group.c), under the team's lock. */
typedef struct mlc_team_groups {
    mlc_request *open; /* still waiting for tensors, in step order */
    /* Groups that a step's first tensor opened and that completed before the step's
     * opener claimed them: that opener then opens nothing. A ring: the entries of steps
     * whose opener never ran (the step failed) are overwritten. */
    mlc_group_step completed_unclaimed[MLC_UNCLAIMED_RING];
    int completed_unclaimed_next;
    /* Groups of a step that this rank cancelled: a tensor of that step that arrives
     * later (its op was already running when the step failed) fails instead of opening
     * a second group of the step, which would meet the other ranks' next request. */
    mlc_group_step cancelled[MLC_CANCELLED_RING];
    int cancelled_next;
    pthread_cond_t ready_cv; /* a tensor of a group arrived */
} mlc_team_groups;

/* The team's counters and who is told of them (mlc_team_set_report). */
typedef struct mlc_team_report {
    mlc_team_stats stats;
    int64_t every;
    mlc_report_fn fn;
    void *user;
} mlc_team_report;

/* What the team's threads did, for a Chrome trace (timeline.c); events NULL: off. */
typedef struct mlc_team_timeline {
    mlc_event *events;
    int64_t capacity;
    _Atomic int64_t used;
} mlc_team_timeline;

/* Device buffers (staged.c): their settings, and the stager the first device call makes. */
typedef struct mlc_team_device {
    pthread_mutex_t lock; /* one device call at a time: they share the stager */
    int nstreams, copies_per_stream;
    int64_t piece_bytes;
    char library[256]; /* the CUDA driver's file ("": libcuda.so.1) */
    mlc_stager *stager;
    int64_t calls;
} mlc_team_device;

struct mlc_team {
    mlc_context *ctx;
    int nthreads;
    mlc_worker *workers;
    char *fusion;
    mlc_team_config config;

    pthread_mutex_t lock; /* guards the queue, request state and stats */
    pthread_cond_t work_cv, done_cv;
    mlc_request *head, *tail;
    uint64_t next_seq;
    mlc_request_note last_request; /* the request that took seq next_seq */
    _Atomic uint64_t published_seq; /* lets idle threads spin briefly without the lock */
    int shutting_down;
    int users; /* holders of mlc_team_acquire: destroy waits for them to release */
    /* The caller-level call a thread is inside (calls.c), under lock but for the end of a
     * call: its requests carry its identity; requests from other threads (a framework's
     * ops) carry none. */
    struct {
        _Atomic int depth; /* calls of `thread` inside one another; 0: none. Lowered
                              by `thread` alone, without the lock (calls.c) */
        pthread_t thread;
        mlc_call_id id;
        int64_t count;      /* calls where steps are not marked, so far */
        int64_t step, next; /* the last marked step, and the next call's place in it */
        int requests;       /* nonzero once the call made a request (-1: forgotten, it takes no place) */
    } call;

    /* The check that the job shares its weights (weights_check.c): `on` until a broadcast
     * or a check of the buffers; meanwhile, under lock, the calls of gradients seen so
     * far, each with the step it came in, and whether a step was refused. */
    struct {
        _Atomic int on;
        int ncalls, refused;
        struct {
            uint64_t call;
            int64_t step;
        } calls[MLC_WEIGHTS_CALLS];
    } weights;

    mlc_team_groups groups;
    mlc_team_caller caller;
    mlc_team_report report;
    mlc_team_timeline timeline;
    mlc_team_device device;
    char last_error[MLC_MSG_LEN];

    MPI_Comm agree_comm; /* carries signatures only */
    mlc_agree agree;     /* agreement checks and stall limits (agree/) */
};

/* team.c: receives and drops every message still queued on comm (a communicator
 * about to be freed); returns how many. */
int mlc_comm_drain(MPI_Comm comm);

/* request.c */
/* Under team->lock. in: the finished signature input; NULL for a keyed group,
 * which hands it to the agreement check when it can (group.c). */
void mlc_queue_request(mlc_team *team, mlc_request *req, const mlc_sign_input *in);
void mlc_free_request(mlc_request *req);
void mlc_plan_request(const mlc_team *team, mlc_request *req, int blocking);
/* Fill req, whose tensors/starts arrays the caller provides (heap or stack), and plan it. */
void mlc_fill_request(mlc_request *req, mlc_team *team, int kind, const mlc_tensor *tensors,
                      int ntensors, int dtype, int op, int root, int blocking);
/* A blocking call of this rank that failed its own check (MLC_BAD_*, detail as agree.h says):
 * it takes its place, carries no data and fails on every rank with the verdict's message
 * naming this rank; where no check runs (one rank, checks off), on this rank alone. */
int mlc_run_faulted(mlc_team *team, int kind, int dtype, int op, int root, int part, int nparts,
                    int call_dtypes, int bad, const int64_t detail[2], char *err, size_t errlen);
/* A collective of rows (allgather, reducescatter, alltoall: kind) that the front end
 * refused on this rank (mlc_team_refuse_call): its first request with no rows, signed with
 * MLC_BAD_REFUSED and refused (tensor, reason), which every rank's matching request fails
 * (rows.c). Never MLC_OK where a check runs. */
int mlc_rows_refuse(mlc_team *team, int kind, const int64_t refused[2], char *err, size_t errlen);
/* A blocking allreduce with no data whose signature carries what this rank's own scan of a
 * call's input found (staged.c): every rank makes it, and it fails on every rank with
 * MLC_ERR_NONFINITE, naming the ranks and tensors, where any rank found NaN/Inf. */
int mlc_run_scanned(mlc_team *team, int dtype, int op, int part, int nparts, int call_dtypes, int tensor,
                    int count, char *err, size_t errlen);
/* Carry out a blocking request (freed after, when on the heap); err gets its message. */
int mlc_run_blocking(mlc_team *team, mlc_request *req, char *err, size_t errlen);
/* The request's description and (non-group) finished signature input. */
void mlc_sign_input_of(const mlc_team *team, const mlc_request *req, mlc_sign_input *in);

/* calls.c: under the team's lock, the identity of a request the calling thread submits. */
mlc_call_id mlc_call_of(const mlc_team *team);

/* team.c */
void mlc_account(mlc_team *team, int64_t bytes, double seconds); /* a request run inline */

/* group.c */
int mlc_group_wait_ready(mlc_request *req, int64_t end); /* MLC_ERR_STATE on shutdown */
int mlc_group_wait_all(mlc_request *req); /* every tensor arrived; MLC_ERR_STATE on shutdown */
void mlc_group_segment_done(mlc_request *req, int64_t start, int64_t count);
/* The request is finished: tell every tensor not told yet (all of them, where the
 * group held them back for its seal) of req->status. */
void mlc_group_finish(mlc_request *req);
void mlc_group_free(mlc_group *g);
int64_t mlc_group_key(const mlc_request *req);

/* seal.c */
int mlc_seal_wanted(const mlc_request *req); /* a keyed group at more than one rank */
void mlc_seal_lane_done(mlc_request *req);   /* under the team lock */
/* Lane 0, once every lane is through the data and every tensor arrived: MLC_OK, or
 * MLC_ERR_MISMATCH with message naming the ranks whose step cancelled the group. */
int mlc_seal(mlc_request *req, mlc_tp *tp, char *scratch, int64_t scratch_bytes, char *message);

/* ahead.c: a ring's first piece sent ahead of the check, for a blocking request of
 * rows. mlc_ahead_bytes_of is what the request sends (its signature says so) and from
 * where (own). Under team->caller.lock: prepare before the request takes its place,
 * post right after (under the team's lock too, so no exchange of it starts before),
 * verdict after its verdict, done after its data; close when the team is destroyed
 * (cancel: MPI still works). */
int64_t mlc_ahead_bytes_of(const mlc_team *team, const mlc_request *req, const char **own);
void mlc_ahead_prepare(mlc_team *team, mlc_request *req);
void mlc_ahead_post(mlc_team *team, mlc_request *req, int64_t bytes); /* what it signed */
void mlc_ahead_verdict(mlc_team *team, mlc_request *req, int verdict);
void mlc_ahead_done(mlc_team *team, mlc_request *req, int verdict, int rc);
void mlc_ahead_close(mlc_team *team, int cancel);

/* execute.c */
int mlc_execute_part(mlc_worker *w, mlc_request *req);

/* thread_cores.c: run `thread` on the listed cores only (MLC_ERR_ARG: an empty list, a
 * negative core, or a set the kernel refuses; MLC_ERR_STATE: not Linux), and name the
 * calling thread "ml_comm-w<index>". */
int mlc_thread_set_cores(pthread_t thread, const int *cores, int ncores);
void mlc_thread_name_self(int index);
int mlc_execute_inline(mlc_team *team, mlc_request *req);
/* The message of a request that failed with MLC_ERR_OVERFLOW: the same on every rank. */
void mlc_overflow_message(const mlc_request *req, char *buf, size_t len);

/* staged.c */
void mlc_device_init(mlc_team *team);
void mlc_device_destroy(mlc_team *team);

/* timeline.c */
void mlc_timeline_record(mlc_team *team, int kind, int thread, int64_t request, int64_t detail,
                         int64_t bytes, double start, double end);

#endif
