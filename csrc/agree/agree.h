/* Agreement check: before a request moves any data, every rank learns what every
 * other rank submitted, and all ranks reach the same verdict (exchange.c says
 * how). The team layer hands each request over finished: its description, its
 * payload (for a direct allreduce) and its finite-scan result, in an
 * mlc_sign_input; the check never looks into groups or execution. */
#ifndef MLC_AGREE_H
#define MLC_AGREE_H

#include <pthread.h>
#include <stdatomic.h>

#include "arrivals.h"
#include "waits.h"
#include "watchdog.h"

/* Below MPICH's eager limit for shared memory (a message of 8 KiB goes slower,
 * signature included; benchmarks/RESULTS.md "Agreement check" as of commit 5719aef). */
#define MLC_DEFAULT_DIRECT_BYTES 4096
/* The most ML_COMM_DIRECT_BYTES may ask, at any rank count: recursive doubling
 * sends it ceil(log2 n) times per rank, so its cost grows with log2 n, not n. */
#define MLC_DIRECT_MAX_BYTES (64 * 1024)
_Static_assert(MLC_ROWS_CARRY_BYTES >= MLC_DIRECT_MAX_BYTES, "carried rows fit the caller's buffer");

/* Tags on the engine's communicator: the tree's records, the full table after a
 * disagreement, and a stall's arrival notices (arrivals.c), which a rank that
 * never stalled leaves unreceived. */
enum { MLC_AGREE_TREE_TAG = 0, MLC_AGREE_TABLE_TAG = 1, MLC_AGREE_NOTICE_TAG = 2 };
/* The table after a disagreement exchanges with this many peers at a time. */
#define MLC_TABLE_WINDOW 32

/* Bytes of a calling thread's name that a signature keeps, for messages. */
#define MLC_ORIGIN_NAME_LEN 24

/* Where a request stands in its caller's program, beyond its layout: ranks whose calls
 * differ here are at different calls (one skipped a call, left a step early, or is a
 * step behind), or on different threads. All zero: not said (a framework's op, but for a
 * pipelined op that carries its counted step: mlc_team_allreduce_async_at). */
typedef struct mlc_call_id {
    int64_t step;  /* the caller's step number; 0: the caller marks no steps */
    int64_t index; /* the call's place in its step on the team (from 0), or, where steps
                    * are not marked, among all of the team's calls */
    uint64_t origin; /* a digest of the calling thread's name (0: not said) */
    char origin_name[MLC_ORIGIN_NAME_LEN]; /* that name, cut, for messages */
} mlc_call_id;

/* mlc_judge's verdict for a rank whose call is ahead of some other rank's: its request
 * is exchanged again, against those ranks' next ones (never seen outside agree/). */
#define MLC_AGREE_RETRY 100

/* What this rank submitted for one request, and how it is to be carried out. */
typedef struct mlc_sign_input {
    mlc_call_id call; /* compared: the rule above (verdict.c) */
    int kind, dtype, op, root;
    int ntensors, part, nparts, is_group;
    int call_dtypes; /* bit d: the caller's call has a part of dtype d (0: not said) */
    int compression; /* the team's MLC_COMPRESSION_* (ranks must agree on it) */
    int cancelled;   /* a keyed group this rank's failed step cancelled: ranks must agree */
    int64_t total, key;
    const mlc_tensor *tensors; /* counts (the layout); for a direct allreduce the input, */
    const int64_t *starts;     /* and where the result goes */
    int direct;                /* the plan sends the input along (algos/allreduce_direct.c) */
    int nonfinite_tensor;      /* first tensor holding NaN/Inf; -1: none or unchecked */
    int nonfinite_count;
    /* The plan and the team's schedule, compared like the shape. */
    int algorithm;      /* the plan's MLC_ALG_* (-1: a broadcast) */
    int team_algorithm; /* the team's (config_team's alg) */
    int on_caller, lanes;
    int64_t seg_elems;
    int64_t ksteps, max_steps; /* config_team's: synchronous or pipelined steps */
    /* Kinds whose sizes differ by rank (a gather of rows): total and layout are
     * not compared, the elements per first-dimension row are. */
    int sizes_vary;
    int64_t row_elements;
    /* Collectives of rows: the dimensions after the first, compared (NULL: not said). */
    int row_ndim;
    const int64_t *row_shape;
    /* The caller's own check of its arguments failed (MLC_BAD_*): the rank still takes
     * part in the exchange, and every rank fails the request, naming what was wrong. */
    int bad_args;
    int64_t bad_detail[2];
    /* Sizes carried by the exchange itself (a collective of rows whose sizes differ by
     * rank, with direct set): sizes_count int64 slots, this rank's own filled and the
     * rest zero. The tree sums them, so every rank learns every rank's sizes with no
     * request of their own, and sizes_out gets the sum. */
    int64_t sizes_count;
    const int64_t *sizes_in;
    int64_t *sizes_out;
    /* An allgather's own rows, carried with its sizes (rows_out not NULL, its
     * rows_capacity at least MLC_ROWS_CARRY_BYTES): rows_bytes of rows_in. While
     * every rank's rows fit the direct payload beside the sizes, the tree joins them
     * in rank order, and rows_out gets every rank's rows as the gathered output lays
     * them out (mlc_agreement.rows_carried). row_elements and dtype give a row's bytes. */
    const void *rows_in;
    int64_t rows_bytes, rows_capacity;
    char *rows_out;
    /* Bytes of a ring's first piece this rank sent to rank r+1 before the check
     * (algos/ring_ahead.c, team/ahead.c), and what it posted (NULL: nothing). Not
     * compared: after a disagreement the table tells rank r+1, and the exchange
     * completes both sides before the verdict (mlc_agree.ahead_tp). */
    int64_t ahead_bytes;
    struct mlc_ring_ahead *ahead;
    const char *ahead_own; /* where those bytes lie: posted again when the check retries */
} mlc_sign_input;

/* What a rank found wrong with its own arguments (mlc_sign_input.bad_args), and what
 * bad_detail holds for each. */
enum {
    MLC_BAD_NONE = 0,
    MLC_BAD_SPLITS_NOT_INTEGERS = 1, /* splits are not a list of integers */
    MLC_BAD_SPLITS_COUNT = 2,        /* how many splits; how many ranks */
    MLC_BAD_SPLIT_NEGATIVE = 3,      /* which split; its value */
    MLC_BAD_SPLITS_SUM = 4,          /* the splits' sum; the input's rows */
    MLC_BAD_ROWS_UNEVEN = 5,         /* no splits: the input's rows; the ranks */
    MLC_BAD_SPLITS_OVERFLOW = 6,     /* splits whose sum passes 2^63-1: the split where it did; its value */
    MLC_BAD_SIZE_OVERFLOW = 7,       /* rows times the row's bytes passes 2^63-1: the rows; the row's elements */
    MLC_BAD_NO_BUFFER = 8,           /* no buffer for bytes that must move: 0 input, 1 output; the bytes */
    /* Device buffers (team/staged.c): */
    MLC_BAD_DEVICE_HOST_ARRAY = 9,   /* a host array among device arrays: which tensor */
    MLC_BAD_DEVICE_LAYOUT = 10,      /* a device array that is not contiguous: which tensor */
    MLC_BAD_DEVICE_MEMORY = 11,      /* memory that is not on a CUDA device: which tensor; 1: CUDA's host memory */
    MLC_BAD_DEVICE_MIXED = 12,       /* a tensor on another device than tensor 0: which tensor; its device */
    MLC_BAD_CUDA = 13,               /* a CUDA call failed: its error code; 0 setting up, 1 copying */
    MLC_BAD_NO_CUDA = 14,            /* no CUDA driver could be loaded */
    MLC_BAD_NO_ROWS = 15,            /* a 0-d input to a collective of rows (MLC_ROWS_NONE) */
    MLC_BAD_ROOT = 16,               /* a broadcast root no rank has: the root; the ranks */
    MLC_BAD_REFUSED = 17             /* the front end refused the call (mlc_team_refuse_call): which
                                      * tensor of its list (-1: none said); why (MLC_REFUSED_*) */
};

/* Where a request stands in the check (mlc_agreement.state). */
enum { MLC_CHECK_NONE = 0, MLC_CHECK_PENDING = 1, MLC_CHECK_DONE = 2 };

/* One request's agreement state, embedded in the team layer's request. */
typedef struct mlc_agreement {
    mlc_sign_input in;
    int64_t seq;
    _Atomic int ready; /* `in` is final (a keyed group's scan waits for its tensors) */
    _Atomic int state; /* MLC_CHECK_*; DONE publishes the fields below */
    int status;
    int done_by_exchange; /* a direct allreduce, or sizes carried: the result is in place */
    int rows_carried;     /* rows_out holds every rank's rows (mlc_sign_input.rows_*) */
    char message[MLC_MSG_LEN];
    int nonfinite_ranks, nonfinite_rank, nonfinite_tensor; /* after MLC_ERR_NONFINITE */
    int stop_asked; /* some rank's signature carried a stop flag (mlc_agree_request_stop) */
    int messages;   /* sent and received by this rank for this request's check */
    /* After a disagreement: what rank r-1 sent this rank ahead (its ahead_bytes),
     * received and dropped, and this rank's own first round completed; -1: no table
     * was exchanged (the ranks agreed, or the exchange failed). */
    int64_t left_ahead;
    struct mlc_agreement *next;
} mlc_agreement;

/* A team's agreement engine. */
typedef struct mlc_agree {
    int layout; /* compare signatures (on by default) */
    int finite; /* scan inputs for NaN/Inf (off by default) */
    mlc_watchdog dog;
    mlc_tp tp;                    /* a communicator carrying signatures only */
    mlc_tp ahead_tp;              /* where rings send their first piece ahead (ops NULL: none) */
    char *ahead_scratch;          /* MLC_RING_PIECE_BYTES: a piece received only to be dropped */
    char ahead_message[MLC_MSG_LEN];
    char tp_message[MLC_MSG_LEN];
    pthread_mutex_t exchange_lock; /* held by the one thread exchanging */
    pthread_mutex_t list_lock;     /* the list below; taken inside the team's lock */
    pthread_cond_t ready_cv;       /* an agreement became ready, or shutdown */
    pthread_cond_t verdict_cv;     /* a verdict is out, or the exchanging thread let go */
    int exchanging;                /* a thread is exchanging (under list_lock) */
    mlc_agreement *head, *tail;    /* registered, not yet exchanged, in queue order */
    int shutting_down;
    int64_t direct_bytes; /* the most a direct allreduce carries (MLC_DIRECT_MAX_BYTES) */
    char *mine, *theirs;  /* this rank's record and a partner's, each with direct_bytes after */
    char *joined;         /* carried rows of two records, joined in rank order */
    char *slots;          /* after a disagreement: every rank's signature (signature.c) */
    mlc_tp_req *reqs;     /* 2 MLC_TABLE_WINDOW: the tree's two, the table's window */
    _Atomic int64_t messages, checks; /* sent and received, and requests checked, in all */
    int64_t rounds; /* exchanges so far: the same on every rank for the same exchange, where
                     * request numbers part after a retry; arrival notices carry it */
    mlc_arrivals arrivals; /* who reached a stalled request (arrivals.c) */
    mlc_waits *waits;      /* the job's long waits, the context's (waits.c); NULL: one rank */
    _Atomic int stop_requested; /* this rank asked to stop: every later signature says so */
    _Atomic int64_t stop_seq;   /* first request whose verdict carried a stop; -1: none yet */
    int drop_left; /* parts of a failed multi-request call to fail without exchanging */
    int drop_status;
    char drop_message[MLC_MSG_LEN];
} mlc_agree;

/* Life cycle (agree.c): init sets defaults and cannot fail; open takes the endpoint of a
 * communicator for this engine alone; destroy works after a failed or no open. */
void mlc_agree_init(mlc_agree *ag);
int mlc_agree_open(mlc_agree *ag, const mlc_tp *tp);
void mlc_agree_destroy(mlc_agree *ag); /* frees memory; sends and cancels nothing */
/* The endpoint on which rings send their first piece ahead of the check (a copy, with
 * its own message buffer and no progress hook): after a disagreement the exchange
 * completes there what was sent ahead. MLC_ERR_NOMEM: no room to receive a piece. */
int mlc_agree_set_ahead_endpoint(mlc_agree *ag, const mlc_tp *tp);
/* Cancel what the engine keeps posted (a stall's arrival notices), while its
 * communicator still works. */
void mlc_agree_cancel(mlc_agree *ag);
void mlc_agree_shutdown(mlc_agree *ag); /* agreements never made ready fail */
int mlc_agree_set_direct_bytes(mlc_agree *ag, int64_t bytes);
/* The engine's other settings, set only through these (the team layer holds its own lock
 * around the checks, which its plans read): what is checked, the team's number in
 * messages, the stall limits, and how the job ends (abort_job) with the job's long waits
 * (NULL at one rank). */
void mlc_agree_set_checks(mlc_agree *ag, int layout, int finite);
void mlc_agree_set_team_id(mlc_agree *ag, int team_id);
void mlc_agree_set_stall_limits(mlc_agree *ag, double warn_seconds, double abort_seconds);
void mlc_agree_set_job(mlc_agree *ag, void (*abort_job)(void *arg, int exit_code), void *abort_arg,
                       mlc_waits *waits);

/* Stopping together: every later signature of this rank carries a stop flag (one
 * atomic store: safe in a signal handler); the verdict on the first request whose
 * table holds one marks it (stop_asked) and the engine (stop_seq) alike on every
 * rank. */
void mlc_agree_request_stop(mlc_agree *ag);
int64_t mlc_agree_stop_seq(mlc_agree *ag);

/* Whether a request of this kind and dtype takes part in the check. */
int mlc_agree_wants(const mlc_agree *ag, int kind, int dtype);
/* Under the team's lock, in queue order: queue a for the exchange; in is final
 * unless it is NULL (then mlc_agree_ready gives it later). */
void mlc_agree_register(mlc_agree *ag, mlc_agreement *a, int64_t seq, const mlc_sign_input *in);
void mlc_agree_ready(mlc_agree *ag, mlc_agreement *a, const mlc_sign_input *in);
/* The verdict on a: MLC_OK, or an error with its text copied into message. The
 * first thread that needs a verdict runs the exchanges of every registered
 * request up to a, in order; the others wait for it. */
int mlc_agree_verdict(mlc_agree *ag, mlc_agreement *a, char *message);
/* Messages this rank sent and received for the checks so far, and the requests checked. */
void mlc_agree_counts(mlc_agree *ag, int64_t *messages, int64_t *checks);

/* signature.c: this rank's signature and its digest; verdict.c: the verdict on n of them,
 * verdict_*.c its messages. */
typedef struct mlc_signature mlc_signature;
size_t mlc_signature_bytes(void); /* MLC_SIGNATURE_BYTES */
void mlc_sign(const mlc_sign_input *in, int stop, mlc_signature *s);
/* A hash of every compared field: equal digests, equal signatures. */
uint64_t mlc_signature_digest(const mlc_signature *s);
int mlc_signature_stop(const mlc_signature *s);
int mlc_signature_bad_args(const mlc_signature *s); /* MLC_BAD_* */
int64_t mlc_signature_ahead(const mlc_signature *s);  /* mlc_sign_input.ahead_bytes */
void mlc_signature_nonfinite(const mlc_signature *s, int *tensor, int *count);
/* verdict.c. The verdict on n signatures at stride slot_bytes, for rank `rank`: MLC_OK,
 * MLC_AGREE_RETRY (the ranks' calls differ and this rank's is the furthest: it waits for
 * the others' next ones), MLC_ERR_MISMATCH (this rank's call is behind another's, naming
 * the ranks ahead and how far; or the shapes or settings differ, naming them and their
 * ranks), MLC_ERR_ARG (a rank's own arguments were bad: naming each such rank and what)
 * or MLC_ERR_NONFINITE, with the message. */
int mlc_judge(const char *slots, size_t slot_bytes, int n, int rank, int team_id, mlc_agreement *a);
/* verdict_ranks.c: "average of 3 float32 tensors, 1000 elements" and the like. */
void mlc_describe_input(const mlc_sign_input *in, char *buf, size_t len);
/* verdict_args.c: "splits add up to 5 rows, the input has 6" and the like: an MLC_BAD_*
 * with its details. */
void mlc_describe_bad_args(int code, const int64_t detail[2], char *buf, size_t len);

#endif
