/* ml_comm public C API.
 *
 * This file is also the cffi declaration (ml_comm/core/build_ffi.py feeds it to
 * ffi.cdef), so it holds no preprocessor lines: C files include <stddef.h> and
 * <stdint.h> before it (csrc/base/base.h does that). Every constant that Python needs
 * is defined here once and read by Python through cffi.
 *
 * Ownership: a context wraps one MPI communicator (it dups it); teams hang off a
 * context; requests hang off a team. There is no global state.
 */

enum mlc_dtype {
    MLC_FLOAT32 = 0,
    MLC_FLOAT64 = 1,
    MLC_FLOAT16 = 2,
    MLC_BFLOAT16 = 3,
    MLC_INT32 = 4,
    MLC_INT64 = 5,
    MLC_UINT8 = 6,
    MLC_INT8 = 7,
    MLC_UINT16 = 8,
    MLC_INT16 = 9,
    MLC_BOOL = 10,      /* moved (broadcast, allgather, alltoall), never reduced */
    MLC_NUM_DTYPES = 11 /* the count: a call's dtypes are the bits 1 << dtype of an int */
};

enum mlc_reduce_op {
    MLC_OP_SUM = 0,
    MLC_OP_AVERAGE = 1,
    MLC_OP_MIN = 2,     /* element-wise; halves compared in float32 */
    MLC_OP_MAX = 3,
    MLC_OP_PRODUCT = 4, /* integers wrap around; halves multiplied in float32 */
    MLC_NUM_OPS = 5
};

/* Algorithm ids accepted by mlc_team_set_algorithm and config_team(alg=...). */
enum mlc_algorithm {
    MLC_ALG_AUTO = 0,               /* latency path below the threshold, then Rabenseifner
                                     * (power-of-two ranks >= 4, up to its threshold), ring above */
    MLC_ALG_RING = 1,               /* pipelined ring reduce-scatter + allgather */
    MLC_ALG_RECURSIVE_DOUBLING = 2, /* log2(n) exchanges of the whole buffer */
    MLC_ALG_RABENSEIFNER = 3,       /* recursive-halving reduce-scatter + recursive-doubling
                                     * allgather: the ring's bytes in 2 log2(n) steps */
    MLC_NUM_ALGORITHMS = 4,         /* the ids a team may be set to */
    MLC_ALG_DIRECT = 4,             /* every rank's input to every rank, inside the agreement
                                     * exchange; only a plan chooses it (MLC_ALG_AUTO, small) */
    MLC_ALG_ALLGATHERV_RING = 5,    /* rows that differ per rank, passed around the ring */
    MLC_ALG_REDUCE_SCATTERV_RING = 6, /* a block per rank (sizes may differ), summed around the ring */
    MLC_ALG_ALLTOALLV_PAIRWISE = 7  /* n-1 pairwise exchanges, rank r with r+s and r-s */
};

enum mlc_request_kind {
    MLC_KIND_ALLREDUCE = 0,
    MLC_KIND_BROADCAST = 1,
    MLC_KIND_ALLGATHER = 2,     /* rows of one shape, their number may differ per rank */
    MLC_KIND_REDUCESCATTER = 3, /* every rank's rows reduced, split by rows over the ranks */
    MLC_KIND_ALLTOALL = 4       /* rank r's split d of rows goes to rank d */
};

enum mlc_status {
    MLC_OK = 0,
    MLC_ERR_ARG = 1,          /* bad argument (message says which) */
    MLC_ERR_NOMEM = 2,
    MLC_ERR_MPI = 3,          /* an MPI call failed (message has MPI's text) */
    MLC_ERR_THREAD_LEVEL = 4, /* MPI is not initialised at MPI_THREAD_MULTIPLE */
    MLC_ERR_STATE = 5,        /* object shut down or in use */
    MLC_PENDING = 6,          /* mlc_request_test: not finished yet */
    MLC_ERR_MISMATCH = 7,     /* ranks submitted different requests (message says what each did) */
    MLC_ERR_NONFINITE = 8,    /* NaN or Inf in a reduction's input (mlc_team_set_checks) */
    MLC_ERR_OVERFLOW = 9,     /* float16 on the wire: a value or sum beyond its range (or NaN/Inf) */
    MLC_ERR_STALL = 10,       /* a wait passed its limit: the ranks wait for requests that cannot
                               * match (a deadlock), or a peer stopped answering */
    MLC_ERR_PEER_LOST = 11    /* a rank left the job or died while this rank waited for it */
};

/* 16-bit values on the wire (mlc_team_set_compression): float32 allreduces that take
 * the ring at more than one rank send bfloat16 or float16 and add in float32. */
enum mlc_compression {
    MLC_COMPRESSION_NONE = 0,
    MLC_COMPRESSION_BF16 = 1,
    MLC_COMPRESSION_FP16 = 2,
    MLC_NUM_COMPRESSIONS = 3
};

typedef struct mlc_context mlc_context;
typedef struct mlc_team mlc_team;
typedef struct mlc_request mlc_request;

/* One buffer of a (possibly fused) reduction. The result is written to data;
 * the input is read from source when it is not NULL (out-of-place, which saves
 * the caller a copy), else from data (in place). shape is mlc_shape_digest of the
 * tensor's dimensions, in the order its elements lie in memory (0: not said): ranks
 * compare it with the count, so that tensors of one count but different shapes
 * (17x1311 and 17x23x57) fail instead of averaging unrelated elements. label is a digest
 * of what the front end calls the tensor beyond its buffer (0: nothing; ml_comm.horovod:
 * its name, the reduction's op and scale factors): ranks compare it too, so that calls
 * of equal shapes made in another order, or reduced otherwise, fail instead of pairing. */
typedef struct mlc_tensor {
    void *data;
    const void *source;
    int64_t count;
    uint64_t shape;
    uint64_t label;
} mlc_tensor;

/* Called once, from a communication thread, when a request finishes.
 * status is MLC_OK or an error code; the request's message says more. */
typedef void (*mlc_callback)(void *user_data, int status);

/* Per-team counters, for the periodic report. */
typedef struct mlc_team_stats {
    int64_t calls;          /* reductions finished */
    int64_t bytes;          /* payload bytes reduced */
    double busy_seconds;    /* summed per request: submit to completion */
    double wait_seconds;    /* time callers spent blocked in mlc_request_wait */
    double exposed_seconds; /* summed per request: from its last input to completion,
                             * what a framework op that needs the result waits at most */
    double thread_cpu_seconds; /* CPU time the team's threads have used since they
                                * started (each thread's own clock): what communication
                                * takes from the cores, waiting included */
} mlc_team_stats;

/* Called from a communication thread (or a blocking caller) after every
 * `every`-th finished reduction of a team, with the team's counters then. */
typedef void (*mlc_report_fn)(void *user_data, const mlc_team_stats *stats);

const char *mlc_version(void);
const char *mlc_status_name(int status);
/* The dtype table (csrc/base/dtype.c), the one list of element types: bytes per
 * element, name ("float32", "bfloat16", ...; "unknown" outside the table), whether it
 * is a floating-point type, and whether the reductions (allreduce, reducescatter)
 * take it (every dtype but bool). */
int mlc_dtype_size(int dtype);
/* The digest mlc_tensor.shape holds: FNV-1a over ndim and the dimensions, never 0. */
uint64_t mlc_shape_digest(int ndim, const int64_t *dims);
const char *mlc_dtype_name(int dtype);
int mlc_dtype_is_float(int dtype);
int mlc_dtype_is_reducible(int dtype);

/* ---- context ---- */
/* comm_handle_address: address of an MPI_Comm (mpi4py: MPI._addressof(comm)).
 * On failure returns NULL and writes a message into err. */
mlc_context *mlc_context_create(uintptr_t comm_handle_address, char *err, size_t errlen);
void mlc_context_destroy(mlc_context *ctx);
int mlc_context_rank(const mlc_context *ctx);
int mlc_context_size(const mlc_context *ctx);
int mlc_context_barrier(mlc_context *ctx);
/* Every rank waiting inside ml_comm this long for requests the others have not made (a
 * blocked caller, an agreement exchange waiting for peers) ends the job with a message
 * naming every rank's wait (agree/waits.c); default 120, 0: never. Ranks busy outside
 * ml_comm keep the stall abort's limit (mlc_team_set_stall_limits). */
int mlc_context_set_deadlock_limit(mlc_context *ctx, double seconds);
const char *mlc_mpi_library_version(char *buf, size_t len);
/* The file of the MPI library the core calls (dladdr of an MPI symbol); "" if unknown. */
const char *mlc_mpi_library_path(char *buf, size_t len);

/* ---- teams ---- */
/* nthreads persistent communication threads, each on its own dup of the
 * context's communicator. fusion_bytes sizes the buffer that packs multi-tensor
 * reductions; chunk_bytes is the pipelining segment size. */
int mlc_team_create(mlc_context *ctx, int nthreads, int64_t fusion_bytes, int64_t chunk_bytes,
                    mlc_team **out, char *err, size_t errlen);
void mlc_team_destroy(mlc_team *team);
int mlc_team_set_algorithm(mlc_team *team, int algorithm);
/* config_team's schedule: the algorithm, and ksteps and max_steps (synchronous or
 * pipelined steps, run by the framework layer); the agreement check compares all
 * three across ranks on every request. */
int mlc_team_set_schedule(mlc_team *team, int algorithm, int64_t ksteps, int64_t max_steps);
/* Reductions with fewer bytes than this take the latency path under MLC_ALG_AUTO. */
int mlc_team_set_latency_threshold(mlc_team *team, int64_t bytes);
/* Under MLC_ALG_AUTO, reductions from the latency threshold up to (not including)
 * this many bytes take Rabenseifner at power-of-two rank counts >= 4 when their
 * values travel uncompressed; the ring above. 0: never. */
int mlc_team_set_rabenseifner_threshold(mlc_team *team, int64_t bytes);
/* Blocking calls up to this many bytes run on the caller's thread, skipping the
 * hand-off to the team's threads; larger ones use all threads. */
int mlc_team_set_inline_threshold(mlc_team *team, int64_t bytes);
/* A framework's gradient of one tensor up to this many bytes (and inline_bytes) is reduced
 * by the op that submits it, as a blocking call on its thread, not as a keyed group
 * (mlc_team_group_by_submit says which, for the plan decides). */
int mlc_team_set_submit_threshold(mlc_team *team, int64_t bytes);
/* MLC_COMPRESSION_*: float32 allreduces on the ring carry 16-bit values from the next
 * request on (the plan decides per request); every rank must use the same value
 * (the agreement check compares it). */
int mlc_team_set_compression(mlc_team *team, int compression);
/* "none", "bf16", "fp16" ("unknown" outside the enum). */
const char *mlc_compression_name(int compression);
typedef struct mlc_team_settings {
    int nthreads;
    int algorithm;
    int64_t chunk_bytes;
    int64_t fusion_bytes;
    int64_t latency_bytes;
    int64_t inline_bytes;
    int64_t direct_bytes; /* mlc_team_set_direct_threshold, as capped (65536 at most) */
    int compression;      /* MLC_COMPRESSION_* */
    int64_t rabenseifner_bytes;
    int64_t submit_bytes; /* mlc_team_set_submit_threshold */
} mlc_team_settings;
void mlc_team_get_settings(const mlc_team *team, mlc_team_settings *out);
void mlc_team_get_stats(const mlc_team *team, mlc_team_stats *out);
/* every <= 0 or fn NULL: no reports. */
int mlc_team_set_report(mlc_team *team, int64_t every, mlc_report_fn fn, void *user_data);
/* The message of the team's most recent failed request ("" if none), for
 * callers that only received a status code. */
const char *mlc_team_last_error(mlc_team *team, char *buf, size_t len);
/* For a rank about to leave (csrc/team/departure.c): the rank of a peer that has sent
 * this rank a message on one of the team's communicators that is not received
 * yet, i.e. a peer inside a team operation this rank has not made; -1 when there
 * is none, -2 while this rank has operations of its own in flight on the team. */
int mlc_team_waiting_peer(mlc_team *team);
/* The number of this rank's last request on the team (0: none; -1: no team), and
 * into buf what it was ("average of 3 float32 tensors, 2307 elements"): a peer that
 * waits for this rank in the team's next request is told apart from one whose
 * request this rank made. */
int64_t mlc_team_last_request(mlc_team *team, char *buf, size_t len);

/* Asynchronous allreduce of the concatenation of tensors (all of one dtype), in
 * place. Tensors of one request are reduced as one buffer; more than one tensor
 * goes through the fusion buffer. callback may be NULL; *out may be NULL when
 * the caller never waits (then the team frees the request itself). */
int mlc_team_allreduce_async(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                             int op, mlc_callback callback, void *user_data, mlc_request **out);
/* Blocking allreduce; small buffers run on the caller's thread. */
int mlc_team_allreduce(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int op,
                       char *err, size_t errlen);
/* The same for one buffer, the common case, without building a tensor list. */
int mlc_team_allreduce_buffer(mlc_team *team, void *data, int64_t count, int dtype, int op, char *err,
                              size_t errlen);
/* One buffer out of place: data = the reduction of every rank's source (source NULL:
 * in place); shape as in mlc_tensor. call_dtypes as for mlc_team_allreduce_part: the bits of the dtypes of the
 * call this buffer is all of, so that it meets a one-dtype tensor-list call alike. */
int mlc_team_allreduce_into(mlc_team *team, const void *source, void *data, int64_t count,
                            int dtype, int op, int call_dtypes, uint64_t shape, char *err,
                            size_t errlen);
/* Keyed groups: the tensors of one fused reduction arrive one at a time (one
 * framework op per gradient), each as soon as it exists. The first arrival of a
 * key opens the group with the whole layout (counts, in layout order) and queues
 * it, so reduction of the leading segments starts while later tensors are still
 * being computed. done(user_data, status) runs, on a communication thread, once
 * this tensor's result is in data. Every rank must open the groups of a team in
 * the same order: at most one open group per key, keys used in step order.
 * source may equal data (in place). */
int mlc_team_group_arrive(mlc_team *team, int64_t key, int ntensors, const int64_t *counts, int dtype,
                          int op, int index, const void *source, void *data, mlc_callback done,
                          void *user_data, char *err, size_t errlen);
/* The same for a group that is part `part` of `nparts` of a call whose dtypes are the
 * bits of call_dtypes (see mlc_team_allreduce_async_part); read at the group's opening.
 * step: the framework's id of the step that submits the tensor (0: none). A tensor
 * joins only a group of its own step, and a group its step's opener has not claimed
 * yet can still be claimed by it (mlc_team_group_open_part). shapes, labels: each
 * tensor's mlc_tensor.shape and .label, in layout order like counts (NULL: not said). */
int mlc_team_group_arrive_part(mlc_team *team, int64_t key, int ntensors, const int64_t *counts,
                               const uint64_t *shapes, const uint64_t *labels, int dtype, int op, int part, int nparts,
                               int call_dtypes, int index,
                               int64_t step, const void *source, void *data, mlc_callback done,
                               void *user_data, char *err, size_t errlen);
/* A step that failed after some of its tensors arrived: cancel the open group in
 * which tensor `index` arrived with user_data. Its missing tensors are taken as
 * zeros so that the request ends in step with the other ranks, and it fails on
 * this rank (the done callbacks still run); the next tensors of key open a new
 * group. With more than one rank the group's seal fails it on every rank, in the
 * same step, naming this rank.
 * MLC_ERR_STATE: no such open group (it is complete, or finished). */
int mlc_team_group_cancel(mlc_team *team, int64_t key, int index, const void *user_data);
/* Open (and queue) the group of step `step` (a framework's step id, not 0) before any
 * of its tensors, at the step's start, as a first arrival would; its tensors then join
 * it. *opener: the id that cancels it, so that a step failing before its first tensor
 * still fails on every rank. The tensors need not wait for the opener: where a tensor
 * of the same step came first (a framework that runs the opener late), the opener
 * claims the group that tensor opened, and where that group is complete already it
 * opens nothing (*opener = 0: nothing left to cancel). */
int mlc_team_group_open_part(mlc_team *team, int64_t key, int ntensors, const int64_t *counts,
                             const uint64_t *shapes, const uint64_t *labels, int dtype, int op, int part, int nparts, int call_dtypes, int64_t step,
                             int64_t *opener, char *err, size_t errlen);
/* mlc_team_group_cancel for the group opened with this id, if it is still open;
 * MLC_ERR_STATE: it is complete (the step's tensors all arrived), or finished. */
int mlc_team_group_cancel_opened(mlc_team *team, int64_t opener);
/* Run ready(user_data, index) on a communication thread as soon as tensor `index` of the
 * group opened with this id is reduced and in its data: before the group's seal
 * (csrc/team/seal.c) has told whether some rank's step cancelled it, so at more than
 * one rank before its done callback. A caller that copies results out of the core's
 * buffer starts on each tensor then, while later segments are still on the wire, and
 * still waits for the done callbacks, whose status says whether the copies hold. Set
 * it before the group's first tensor arrives. MLC_ERR_STATE: no such open group. */
typedef void (*mlc_ready_callback)(void *user_data, int index);
int mlc_team_group_watch(mlc_team *team, int64_t opener, mlc_ready_callback ready, void *user_data);
/* 1: a keyed group of these tensors is not one: its plan has the tensor's submit reduce it
 * then and there (mlc_team_allreduce_into), on every rank alike; 0: a keyed group. */
int mlc_team_group_by_submit(mlc_team *team, int ntensors, const int64_t *counts, int dtype);
/* Hold a team across a use from a thread that does not own it: MLC_ERR_STATE once
 * it is shutting down. mlc_team_destroy waits until every hold is released. */
int mlc_team_acquire(mlc_team *team);
void mlc_team_release(mlc_team *team);
/* Asynchronous / blocking broadcast of root's buffers into every rank's. */
int mlc_team_broadcast_async(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                             int root, mlc_callback callback, void *user_data, mlc_request **out);
int mlc_team_broadcast(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                       int root, char *err, size_t errlen);

/* ---- collectives of rows (csrc/team/rows.c): blocking, on the caller's thread ----
 * A buffer of rows of one shape: row_shape holds the row_ndim dimensions after the
 * first (none: rows of one element); the first dimension may differ by rank where
 * said. Every call is checked by the agreement like an allreduce (kind, dtype, op,
 * the rows' shape; layout where sizes agree), so a rank that calls another
 * collective, another dtype or rows of another shape fails on every rank with
 * MLC_ERR_MISMATCH naming each rank's call. Calls that come in two steps (the
 * sizes, then the data) are parts 1 and 2 of 2 of one call: a caller whose first
 * step failed makes no second. A caller whose tensor has no first dimension (0-d)
 * passes row_ndim MLC_ROWS_NONE (row_shape and rows ignored) to the calls that sign
 * (allgather step 1, reducescatter, alltoall step 1): every rank then fails the call
 * with MLC_ERR_ARG naming the ranks that did, instead of the others waiting for them. */
enum { MLC_ROWS_NONE = -1 };
/* The team's rank and number of ranks (its context's). */
int mlc_team_rank(const mlc_team *team);
int mlc_team_size(const mlc_team *team);
/* Allgather, step 1: every rank's number of rows into all_rows (size entries). Small
 * rows travel with them: given input (rows rows) and carried (MLC_ROWS_CARRY_BYTES
 * bytes), when every rank's rows fit its share of the agreement's direct payload
 * ((ML_COMM_DIRECT_BYTES - 8 size) / size bytes), carried gets the gathered output's
 * bytes, *carried_done is 1, and there is no step 2 (on every rank alike). input and
 * carried NULL: counts only. */
enum { MLC_ROWS_CARRY_BYTES = 65536 };
int mlc_team_allgather_rows(mlc_team *team, int64_t rows, int row_ndim, const int64_t *row_shape,
                            int dtype, const void *input, void *carried, int *carried_done,
                            int64_t *all_rows, char *err, size_t errlen);
/* Allgather, step 2 (when step 1 did not carry the rows): output (sum of all_rows rows)
 * = every rank's input rows, in rank order. Called with the counts step 1 returned, it
 * is covered by step 1's agreement check and sends none of its own; so a rank that
 * cannot allocate its output must still call it, with output NULL: it then forwards the
 * others' rows (the ring needs every rank), keeps none and returns MLC_OK, and the
 * caller fails its call on that rank. */
int mlc_team_allgatherv(mlc_team *team, const void *input, void *output, const int64_t *all_rows,
                        int row_ndim, const int64_t *row_shape, int dtype, char *err, size_t errlen);
/* Reduce-scatter: input (rows rows, alike on every rank) reduced with op over the ranks;
 * rank r receives mlc_rows_share(rows, size, r) rows, rank order, into output. */
int mlc_team_reducescatter(mlc_team *team, const void *input, void *output, int64_t rows,
                           int row_ndim, const int64_t *row_shape, int dtype, int op, char *err,
                           size_t errlen);
/* Alltoall, step 1: the input has rows rows; splits[d] of them go to rank d (nsplits
 * entries, which must be one per rank; nsplits < 0: the caller found splits that are
 * not a list of integers; splits NULL: rows / size to each rank). Fills send_rows (the
 * splits) and recv_rows[s] (the rows rank s sends here), size entries each. Splits
 * that are wrong on any rank fail the call on every rank with MLC_ERR_ARG, naming each
 * such rank and what was wrong, before any data moves. */
int mlc_team_alltoall_splits(mlc_team *team, const int64_t *splits, int nsplits, int64_t rows,
                             int row_ndim, const int64_t *row_shape, int dtype, int64_t *send_rows,
                             int64_t *recv_rows, char *err, size_t errlen);
/* Alltoall, step 2: input holds the splits in rank order, output receives them in rank order. */
int mlc_team_alltoallv(mlc_team *team, const void *input, const int64_t *send_rows, void *output,
                       const int64_t *recv_rows, int row_ndim, const int64_t *row_shape, int dtype,
                       char *err, size_t errlen);

/* ---- agreement checks and the stall watchdog (csrc/agree/exchange.c, watchdog.c) ---- */
/* Before a request moves any data, the ranks exchange its signature (kind, dtype,
 * op, root, tensor counts) and, when they differ, fail it on every rank with
 * MLC_ERR_MISMATCH and a message saying what each rank submitted (layout: on by
 * default). finite: each rank also scans its floating-point input for NaN/Inf and
 * the request fails on every rank with MLC_ERR_NONFINITE, naming the ranks and
 * tensors (off by default). Every rank must use the same settings. */
int mlc_team_set_checks(mlc_team *team, int layout, int finite);
/* A wait inside a team operation longer than warn_seconds prints to stderr which
 * ranks it waits for, again every warn_seconds (0: never; default 60); past
 * abort_seconds (0: never, the default) it prints that and calls MPI_Abort. */
int mlc_team_set_stall_limits(mlc_team *team, double warn_seconds, double abort_seconds);
/* Allreduces of up to this many bytes (default 4096, at most 65536 at any rank
 * count) travel inside the agreement check's messages under MLC_ALG_AUTO:
 * log2(n) message latencies in all, summed along the check's recursive-doubling
 * tree (the same bits on every rank). 0: never. */
int mlc_team_set_direct_threshold(mlc_team *team, int64_t bytes);
/* Messages this rank sent and received for agreement checks so far, and the
 * requests checked: at most 2 ceil(log2 n) per request where the ranks agree. */
int mlc_team_agreement_counts(mlc_team *team, int64_t *messages, int64_t *checks);
/* The time slice (ns) the team's threads ask Linux's scheduler for, each before its next
 * request, so that a thread woken to move bytes runs before a compute thread on its core
 * ends its own slice (csrc/base/thread_slice.c; Linux 6.12 and later). 0, the default:
 * the kernel's own. */
int mlc_team_set_thread_slice(mlc_team *team, int64_t ns);
/* Run every thread of the team on the ncores cores listed (Linux CPU numbers), the
 * kernel placing each thread within the whole list, from now on (csrc/team/thread_cores.c).
 * ncores 0: the threads keep the affinity they inherited from the process, the default.
 * MLC_ERR_ARG: a negative core, or a list the kernel refuses (none of the process's
 * allowed cores); MLC_ERR_STATE: not Linux. The threads are named "ml_comm-w<i>". */
int mlc_team_set_thread_cores(mlc_team *team, const int *cores, int ncores);
/* A caller-level call (one gradients, average, broadcast...) of the calling thread on the
 * team begins: its requests carry where it stands, which the ranks must share beyond the
 * requests' layout (the agreement check compares it): step, the caller's step number (0:
 * it marks no steps), the call's place in that step on this team or, where steps are not
 * marked, among the team's calls (counted here, on entry: a call that fails on this rank
 * before it reaches the others still takes its place), and origin, a digest of the
 * calling thread's name (0: not said), with the name for messages. Requests of other
 * threads (a framework's ops) carry none. Where the ranks' places differ, the requests
 * behind the furthest fail, naming the ranks ahead and how far, and the furthest are
 * checked again against the others' next requests, so the ranks realign; ranks whose
 * origins differ fail. MLC_ERR_STATE (err says which thread): another thread is inside a
 * call on the team (the call is counted all the same); calls of one thread may nest. */
int mlc_team_begin_call(mlc_team *team, int64_t step, uint64_t origin, const char *origin_name, char *err,
                        size_t errlen);
void mlc_team_end_call(mlc_team *team);
/* The calling thread's call raised an earlier call's failure (a pipelined team's reduction
 * in flight) before it submitted anything: it takes no place, as on a synchronous rank,
 * where the same failure ended the earlier call itself. */
void mlc_team_forget_call(mlc_team *team);
/* A front end's thread waits for the team from outside the core (a framework's step whose
 * ops the core completes by callback): +1 as it starts, -1 as it ends. Meanwhile the
 * deadlock check (mlc_context_set_deadlock_limit) counts it as blocked inside ml_comm, as a
 * thread in mlc_request_wait; its steps' agreement checks that wait for peers decide. */
void mlc_team_caller_waits(mlc_team *team, int delta);
/* Why a front end refused a call on this rank (mlc_team_refuse_call). */
enum mlc_refusal {
    MLC_REFUSED_RAISED = 0,    /* an exception of no argument check */
    MLC_REFUSED_NONE = 1,      /* a tensor is None */
    MLC_REFUSED_NOT_ARRAY = 2, /* a tensor is no array the call takes */
    MLC_REFUSED_DTYPE = 3,     /* a tensor's dtype */
    MLC_REFUSED_TYPE = 4,      /* an argument's type */
    MLC_REFUSED_VALUE = 5      /* an argument's value */
};
/* The calling thread's call (mlc_team_begin_call) failed on this rank before it made any
 * request, perhaps on this rank alone (an argument only it finds wrong): a request of
 * `kind` (MLC_KIND_*; of a collective of rows, its first request) with no data takes its
 * place, which every rank's matching request fails with MLC_ERR_ARG, naming this rank,
 * `tensor` (its place in the call's list; -1: none said) and `reason` (MLC_REFUSED_*),
 * instead of the others waiting for a request this rank never makes. MLC_OK, doing nothing, where the
 * call made a request already, was forgotten, or is nested in another; else the
 * request's status (MLC_ERR_ARG when the ranks met), err saying why. Called outside any
 * call of the thread (a framework's ops, whose requests carry no identity, before the
 * front end built any), the request is sent, with no identity either. */
int mlc_team_refuse_call(mlc_team *team, int kind, int64_t tensor, int reason, char *err, size_t errlen);
/* The check that the job shares its weights (csrc/team/weights_check.c). A job that
 * averages gradients but never broadcasts one rank's weights starts each rank from weights
 * of its own and trains as many models as it has ranks, without any error. on 1 (the
 * framework layer's default, on more than one rank): a call of gradients that the team
 * saw in an earlier step fails until set to 0 (a broadcast or a check of the buffers
 * ran: the job's weights are shared). Off (0) when created. */
int mlc_team_set_weights_check(mlc_team *team, int on);
/* A call of gradients on the team begins: step, the framework's id of the step it runs in
 * (a traced step's ops share it; 0: the call is a step of its own); call, which call of
 * the step it is, alike in every step (a digest of its gradients' layout, or the graph's
 * key of the call), compared on this rank only. MLC_ERR_STATE, err saying why and what to
 * do, where the check is on and the call came in an earlier step (the model's second
 * step), and from then on for every call; the same on every rank, which make the same
 * calls and broadcasts. */
int mlc_team_weights_step(mlc_team *team, int64_t step, uint64_t call, char *err, size_t errlen);
/* Whether the check refused a step on the team. */
int mlc_team_weights_refused(mlc_team *team);
/* The number messages call the team by (the caller's team index; default 0). */
int mlc_team_set_id(mlc_team *team, int id);
/* Requests that are part `part` of `nparts` of one caller-level call (a gradient
 * list of several dtypes: one request per dtype). nparts is part of the signature,
 * so ranks whose calls split differently fail at the first part; after a failed
 * part each rank fails its call's remaining parts without exchanging, and the
 * next call starts in step on every rank. call_dtypes: bit (1 << d) for each dtype
 * d of the call (0: not said); compared too, and named in the mismatch message. */
int mlc_team_allreduce_async_part(mlc_team *team, const mlc_tensor *tensors, int ntensors,
                                  int dtype, int op, int part, int nparts, int call_dtypes,
                                  mlc_callback callback, void *user_data, mlc_request **out);
/* mlc_team_allreduce_async_part for a request made outside any call of the API whose
 * place in its caller's program the caller knows (a pipelined step of Keras, whose steps
 * ml_comm counts: mlc_pipeline_turn's step and index, the call's place among its
 * pipeline's calls in that step): it carries step (>= 1) and index, and the ranks
 * compare them as those of calls marked with
 * ml_comm.step (mlc_team_begin_call): a rank that left a step before its call is found
 * behind, instead of its next step pairing with the others' current one. step 0: as
 * mlc_team_allreduce_async_part. */
int mlc_team_allreduce_async_at(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                                int op, int part, int nparts, int call_dtypes, int64_t step,
                                int64_t index, mlc_callback callback, void *user_data,
                                mlc_request **out);
/* Blocking form of mlc_team_allreduce_async_part: small calls run on the caller's
 * thread, with no hand-off to the team's threads (mlc_team_allreduce). */
int mlc_team_allreduce_part(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                            int op, int part, int nparts, int call_dtypes, char *err,
                            size_t errlen);
int mlc_team_broadcast_part(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                            int root, int part, int nparts, int call_dtypes, char *err,
                            size_t errlen);
/* Stopping together (a signal, a time limit): from now on every signature this rank
 * sends on the team carries a stop flag (one atomic store: safe in a signal handler).
 * Every rank's verdict on the first request whose signatures carry one marks that
 * request, and the team, alike; nothing is exchanged for it otherwise. Needs the
 * agreement check (layout on) and more than one rank. */
int mlc_team_request_stop(mlc_team *team);
/* The team's first request (its number, counted from 1) at which some rank had asked
 * to stop; -1 while none has. Every request up to one that the caller has waited for
 * has its verdict on every rank, so the answer is the same everywhere there. */
int64_t mlc_team_stop_seq(const mlc_team *team);
/* 1 when the request's verdict found that some rank had asked to stop. */
int mlc_request_stop_asked(const mlc_request *req);

/* ---- device buffers: CUDA memory staged through pinned host memory (csrc/team/staged.c) ----
 * The CUDA driver is loaded at the first device call (nothing of CUDA before: a machine
 * without it never needs it). A call's bytes are cut into pieces of piece_bytes; piece k+1
 * comes down and piece k-1 goes up on the team's CUDA streams while the ranks reduce piece k
 * in pinned host memory (3 slots of piece_bytes per team, kept until the team ends). Each
 * piece is one blocking request of the host path, checked like any other. */
/* nstreams (1 to 16; half carry downloads, half uploads), copies_per_stream (a piece's copy is
 * cut into at most this many), piece_bytes (>= 8; rounded down to a multiple of 8),
 * cuda_library (the driver's file; NULL or "": libcuda.so.1): from the next device call. */
int mlc_team_set_device_staging(mlc_team *team, int nstreams, int copies_per_stream, int64_t piece_bytes,
                                const char *cuda_library);
/* What a front end found wrong with one rank's arrays before the call (fault_tensor says which). */
enum mlc_device_fault {
    MLC_DEVICE_FAULT_NONE = 0,
    MLC_DEVICE_FAULT_HOST_ARRAY = 1,    /* a host array among device arrays */
    MLC_DEVICE_FAULT_NOT_CONTIGUOUS = 2 /* a device array that is not one contiguous block */
};
/* mlc_team_allreduce_part / mlc_team_broadcast_part of tensors whose data (and source, where
 * not NULL) are CUDA device memory, all on one device; the results are on the device when it
 * returns. stream: the caller's CUstream (0: the legacy default stream): the copies wait for
 * the work queued on it first. A fault found by the caller, memory that is not device memory,
 * tensors on two devices, and a failing CUDA call fail the call on every rank (the message names
 * the ranks and tensors), so no rank waits for another; only a failed copy back of the last
 * piece fails on its rank alone. With the finite check, every piece is scanned before any is
 * reduced (a NaN leaves every array as it was). */
int mlc_team_allreduce_device(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int op,
                              int part, int nparts, int call_dtypes, uintptr_t stream, int fault,
                              int64_t fault_tensor, char *err, size_t errlen);
int mlc_team_broadcast_device(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int root,
                              int part, int nparts, int call_dtypes, uintptr_t stream, int fault,
                              int64_t fault_tensor, char *err, size_t errlen);
/* The team's device calls so far, and the bytes their copies moved each way with the time the
 * copies themselves took (CUDA's events around each piece's copies). */
typedef struct mlc_device_stats {
    int64_t calls, bytes_down, bytes_up;
    double seconds_down, seconds_up;
} mlc_device_stats;
void mlc_team_get_device_stats(mlc_team *team, mlc_device_stats *out);

/* ---- timeline: what the team's threads did, for a Chrome trace ---- */
enum mlc_event_kind {
    MLC_EVENT_SEGMENTS = 0, /* a thread reduced a batch of segments: [start, end] */
    MLC_EVENT_ARRIVE = 1,   /* a tensor of a keyed group arrived (start == end) */
    MLC_EVENT_REQUEST = 2   /* a request, from queueing to completion */
};
typedef struct mlc_event {
    double start, end; /* seconds, CLOCK_MONOTONIC (see mlc_clock) */
    int kind;
    int thread;        /* team thread index; -1: the caller's thread */
    int64_t request;   /* the request's position in the team's queue */
    int64_t detail;    /* first segment, tensor index, or number of tensors */
    int64_t bytes;
} mlc_event;
/* Record up to capacity events from now on (0 stops recording). */
int mlc_team_timeline_enable(mlc_team *team, int64_t capacity);
/* Copy recorded events (at most max) into out; returns how many. */
int64_t mlc_team_timeline_read(mlc_team *team, mlc_event *out, int64_t max);
double mlc_clock(void);

/* ---- requests ---- */
int mlc_request_wait(mlc_request *req);
int mlc_request_test(mlc_request *req); /* MLC_PENDING, MLC_OK or an error */
const char *mlc_request_message(const mlc_request *req);
/* After MLC_ERR_NONFINITE: how many ranks had NaN/Inf in their input, the lowest
 * such rank and the position of its first such tensor in its list. */
int mlc_request_nonfinite(const mlc_request *req, int *rank, int *tensor);
void mlc_request_free(mlc_request *req); /* after wait/test said finished */

/* A wait for the done callbacks of tensors handed to keyed groups, for a caller with no
 * thread of its own to take them (csrc/base/latch.c): add one per tensor handed over,
 * pass mlc_latch_done as its done callback with the latch as user_data, and wait for
 * the count to reach zero: MLC_OK or the first failure. */
typedef struct mlc_latch mlc_latch;
mlc_latch *mlc_latch_create(void);
void mlc_latch_add(mlc_latch *latch, int64_t n);
void mlc_latch_done(void *user_data, int status);
int mlc_latch_wait(mlc_latch *latch);
void mlc_latch_free(mlc_latch *latch);

/* ---- the rules callers share with the core ---- */
/* Where the front ends' results come from (NumPy's pool, the TensorFlow op's allocator): a
 * result of a page-faulting fresh buffer costs more than its reduction from this size, so
 * results from MLC_RESULT_POOL_BYTES come from memory earlier calls touched; from
 * MLC_HUGE_FROM_BYTES (NumPy's own threshold for the advice) they are aligned to
 * MLC_HUGE_PAGE_BYTES and advised to take huge pages. */
enum {
    MLC_RESULT_POOL_BYTES = 262144,
    MLC_HUGE_FROM_BYTES = 4194304,
    MLC_HUGE_PAGE_BYTES = 2097152
};
/* Rows split over the ranks as evenly as can be, the first rows % size ranks one more:
 * rank r's share and the row it starts at. */
int64_t mlc_rows_share(int64_t rows, int size, int rank);
int64_t mlc_rows_first(int64_t rows, int size, int rank);
/* Pipelined teams (config_team ksteps/max_steps): what gradients() call number
 * `call` (0-based, per team and gradient layout) does. */
enum mlc_step_phase {
    MLC_STEP_SYNC = 0,           /* reduce this call's gradients, return their average */
    MLC_STEP_PIPELINE_START = 1, /* start this call's reduction, return zeros (mlc_pipeline_next:
                                  * with a reduction still to return, these two act as DRAIN
                                  * and PIPELINED) */
    MLC_STEP_PIPELINED = 2,      /* return the previous call's average, start this call's */
    MLC_STEP_DRAIN = 3           /* return the previous call's average plus this call's */
};
int mlc_step_phase(int64_t call, int64_t ksteps, int64_t max_steps);
/* One pipeline of a pipelined team: the calls of one gradient layout (csrc/pipeline/). The
 * core decides what each call does (mlc_pipeline_next); the front end moves the data: it
 * finishes `finish` (the previous call's reduction, by the handle it gave), reduces this
 * call's gradients now where reduce_now says, starts their reduction on copies where
 * start says (and hands its handle to mlc_pipeline_started), and returns what result
 * says. A call whose `finish` failed raises that error: where restart_on_failure says
 * so it starts nothing (the next call enters the pipeline afresh), else it first does
 * its own part (starts; or reduces now and hands the average to mlc_pipeline_started as
 * a reduction done), and the pipeline goes on. */
typedef struct mlc_pipeline {
    int64_t calls, ksteps, max_steps;
    int64_t step, index; /* the last call's step (0: not marked) and its place in that step */
    void *in_flight;     /* the front end's handle of the reduction the last call started */
} mlc_pipeline;
enum mlc_pipeline_result {
    MLC_RESULT_NOW = 0,      /* this call's average */
    MLC_RESULT_ZEROS = 1,    /* zeros: entering the pipeline, or no previous reduction */
    MLC_RESULT_PREVIOUS = 2, /* the previous call's average */
    MLC_RESULT_BOTH = 3      /* the previous call's average plus this call's */
};
typedef struct mlc_pipeline_turn {
    int phase;      /* MLC_STEP_* */
    void *finish;   /* the previous call's reduction, to finish first; NULL: none */
    int reduce_now; /* reduce this call's gradients before returning */
    int start;      /* copy this call's gradients and start their reduction */
    int result;     /* MLC_RESULT_* */
    int64_t step, index; /* the call's place, for requests made outside a call of the API
                          * (mlc_team_allreduce_async_at); step 0: not marked */
    int restart_on_failure; /* where `finish` failed: 1, start nothing; 0, go on */
} mlc_pipeline_turn;
void mlc_pipeline_init(mlc_pipeline *p, int64_t ksteps, int64_t max_steps);
/* The next call's turn. step: the caller's step number (0: steps not marked). */
mlc_pipeline_turn mlc_pipeline_next(mlc_pipeline *p, int64_t step);
void mlc_pipeline_started(mlc_pipeline *p, void *reduction);
