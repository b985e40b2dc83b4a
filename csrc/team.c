/* Teams: persistent communication threads fed by one FIFO of requests.
 *
 * Every thread of a team takes every request, in queue order, and does its own
 * segments of it (execute.c). The request completes when its last thread is
 * done; that thread updates the stats, runs the callback and wakes waiters.
 * Requests complete in queue order (each thread finishes request k before it
 * starts k+1), so the finished request is always the head of the queue.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "team.h"

/* Idle threads poll this long before sleeping: a request that follows soon after
 * the previous one starts without a wake-up, and idle teams still use no CPU. */
#define MLC_IDLE_SPIN_SECONDS 50e-6
/* A caller blocked on a request polls this long before sleeping. */
#define MLC_WAIT_SPIN_SECONDS 200e-6
/* Defaults of the thresholds; README "Tuning" and benchmarks/RESULTS.md say why. */
#define MLC_DEFAULT_LATENCY_BYTES (512 * 1024)
#define MLC_DEFAULT_INLINE_BYTES (4 * 1024 * 1024)

/* The caller's buffers: the latency path packs and receives whole buffers below
 * latency_bytes; the inline ring stages and receives a batch of segments. */
static int resize_caller_buffers(mlc_team *team) {
    int64_t ring = MLC_RING_BATCH * team->chunk_bytes + 64;
    int64_t bytes = team->latency_bytes > ring ? team->latency_bytes : ring;
    char *pack = realloc(team->caller_pack, bytes);
    if (!pack) return MLC_ERR_NOMEM;
    team->caller_pack = pack;
    team->caller_pack_bytes = bytes;
    char *scratch = realloc(team->caller_scratch, bytes);
    if (!scratch) return MLC_ERR_NOMEM;
    team->caller_scratch = scratch;
    team->caller_scratch_bytes = bytes;
    return MLC_OK;
}

static void set_error(char *err, size_t errlen, const char *text) {
    if (err && errlen) snprintf(err, errlen, "%s", text);
}

static mlc_request *next_request(mlc_worker *w) {
    mlc_team *team = w->team;
    double until = mlc_now() + MLC_IDLE_SPIN_SECONDS;
    while (atomic_load(&team->published_seq) <= w->last_seq && mlc_now() < until) sched_yield();
    pthread_mutex_lock(&team->lock);
    while (atomic_load(&team->published_seq) <= w->last_seq && !team->shutting_down)
        pthread_cond_wait(&team->work_cv, &team->lock);
    mlc_request *req = team->head;
    while (req && req->seq <= w->last_seq) req = req->next;
    pthread_mutex_unlock(&team->lock);
    return req; /* NULL only when shutting down with nothing left */
}

void mlc_free_request(mlc_request *req) {
    if (!req->heap) return; /* a blocking call's request on its caller's stack */
    free(req->tensors);
    free(req->starts);
    free(req->arrived);
    free(req->segs_left);
    free(req->tensor_done);
    free(req->tensor_user);
    free(req);
}

/* A report to make once the team lock is released. */
typedef struct due_report {
    mlc_report_fn fn; /* NULL: none due */
    void *user;
    mlc_team_stats stats;
} due_report;

/* Under the team lock, after a reduction was counted. */
static due_report report_due(const mlc_team *team) {
    due_report r = {NULL, NULL, team->stats};
    if (team->report_fn && team->report_every > 0 && team->stats.calls % team->report_every == 0) {
        r.fn = team->report_fn;
        r.user = team->report_user;
    }
    return r;
}

int mlc_team_set_report(mlc_team *team, int64_t every, mlc_report_fn fn, void *user_data) {
    if (!team) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->lock);
    team->report_every = every;
    team->report_fn = fn;
    team->report_user = user_data;
    pthread_mutex_unlock(&team->lock);
    return MLC_OK;
}

static void finish_part(mlc_team *team, mlc_request *req, int status, const char *message) {
    due_report report = {NULL, NULL, {0}};
    pthread_mutex_lock(&team->lock);
    if (status != MLC_OK && req->status == MLC_OK) {
        req->status = status;
        snprintf(req->message, MLC_MSG_LEN, "%s", message[0] ? message : mlc_status_name(status));
        memcpy(team->last_error, req->message, MLC_MSG_LEN);
    }
    int last = --req->workers_left == 0;
    if (last) {
        team->head = req->next; /* see the file comment: req is the head */
        if (!team->head) team->tail = NULL;
        team->stats.calls++;
        team->stats.bytes += req->total * mlc_dtype_size(req->dtype);
        double now = mlc_now();
        team->stats.busy_seconds += now - req->submitted_at;
        team->stats.exposed_seconds += now - req->ready_at;
        report = report_due(team);
        mlc_timeline_record(team, MLC_EVENT_REQUEST, -1, (int64_t)req->seq, req->ntensors,
                            req->total * mlc_dtype_size(req->dtype), req->submitted_at, now);
    }
    pthread_mutex_unlock(&team->lock);
    if (!last) return;
    if (report.fn) report.fn(report.user, &report.stats);
    if (req->status != MLC_OK) mlc_group_fail_remaining(req);
    if (req->callback) req->callback(req->user_data, req->status);
    pthread_mutex_lock(&team->lock);
    int detached = req->detached;
    req->finished = 1;
    pthread_cond_broadcast(&team->done_cv);
    pthread_mutex_unlock(&team->lock);
    if (detached) mlc_free_request(req);
}

static void *worker_main(void *arg) {
    mlc_worker *w = arg;
    mlc_request *req;
    while ((req = next_request(w)) != NULL) {
        int status = mlc_execute_part(w, req);
        w->last_seq = req->seq;
        finish_part(w->team, req, status, w->message);
    }
    return NULL;
}

static int dup_comm(MPI_Comm parent, MPI_Comm *out, char *err, size_t errlen) {
    int rc = MPI_Comm_dup(parent, out);
    if (rc != MPI_SUCCESS) {
        char msg[MLC_MSG_LEN];
        mlc_mpi_error(msg, rc, "MPI_Comm_dup");
        set_error(err, errlen, msg);
        return MLC_ERR_MPI;
    }
    return MLC_OK;
}

int mlc_team_create(mlc_context *ctx, int nthreads, int64_t fusion_bytes, int64_t chunk_bytes,
                    mlc_team **out, char *err, size_t errlen) {
    *out = NULL;
    if (!ctx || nthreads < 1 || nthreads > 256 || fusion_bytes < 0 || chunk_bytes < 8) {
        set_error(err, errlen, "mlc_team_create: need 1 <= nthreads <= 256, fusion_bytes >= 0, chunk_bytes >= 8");
        return MLC_ERR_ARG;
    }
    mlc_team *team = calloc(1, sizeof *team);
    if (!team) return MLC_ERR_NOMEM;
    team->ctx = ctx;
    team->nthreads = nthreads;
    team->chunk_bytes = chunk_bytes / 8 * 8;
    team->window_segments = (fusion_bytes + team->chunk_bytes - 1) / team->chunk_bytes;
    /* At least two slots per thread, so a thread's ring batch never shares a slot. */
    if (team->window_segments < (int64_t)nthreads * MLC_RING_BATCH)
        team->window_segments = (int64_t)nthreads * MLC_RING_BATCH;
    team->algorithm = MLC_ALG_AUTO;
    team->latency_bytes = MLC_DEFAULT_LATENCY_BYTES;
    team->inline_bytes = MLC_DEFAULT_INLINE_BYTES;
    pthread_mutex_init(&team->lock, NULL);
    pthread_mutex_init(&team->caller_lock, NULL);
    pthread_cond_init(&team->work_cv, NULL);
    pthread_cond_init(&team->done_cv, NULL);
    pthread_cond_init(&team->ready_cv, NULL);
    team->caller_comm = MPI_COMM_NULL;
    mlc_guard_init(team);
    team->fusion = malloc(team->window_segments * team->chunk_bytes);
    team->workers = calloc(nthreads, sizeof *team->workers);
    if (!team->fusion || resize_caller_buffers(team) != MLC_OK || !team->workers) {
        mlc_team_destroy(team);
        set_error(err, errlen, "out of memory allocating the team's buffers");
        return MLC_ERR_NOMEM;
    }
    int rc = dup_comm(ctx->comm, &team->caller_comm, err, errlen);
    if (rc == MLC_OK) rc = mlc_guard_open(team, err, errlen);
    for (int i = 0; i < nthreads && rc == MLC_OK; i++) {
        mlc_worker *w = &team->workers[i];
        w->team = team;
        w->index = i;
        w->comm = MPI_COMM_NULL;
        w->scratch_bytes = MLC_RING_BATCH * team->chunk_bytes + 64;
        w->scratch = malloc(w->scratch_bytes);
        if (!w->scratch) rc = MLC_ERR_NOMEM;
        else rc = dup_comm(ctx->comm, &w->comm, err, errlen);
    }
    /* Threads start only once every communicator exists: a failure above leaves none running. */
    for (int i = 0; i < nthreads && rc == MLC_OK; i++) {
        if (pthread_create(&team->workers[i].thread, NULL, worker_main, &team->workers[i]) != 0) {
            set_error(err, errlen, "pthread_create failed for a communication thread");
            team->nthreads = i; /* join only those that started */
            rc = MLC_ERR_NOMEM;
        }
    }
    if (rc != MLC_OK) {
        mlc_team_destroy(team);
        return rc;
    }
    *out = team;
    return MLC_OK;
}

static void free_comm(MPI_Comm *comm) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (*comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(comm);
}

void mlc_team_destroy(mlc_team *team) {
    if (!team) return;
    pthread_mutex_lock(&team->lock);
    team->shutting_down = 1; /* threads finish what is queued, then leave */
    pthread_cond_broadcast(&team->work_cv);
    pthread_cond_broadcast(&team->ready_cv); /* groups still missing tensors fail */
    pthread_mutex_unlock(&team->lock);
    for (int i = 0; team->workers && i < team->nthreads; i++)
        if (team->workers[i].thread) pthread_join(team->workers[i].thread, NULL);
    for (int i = 0; team->workers && i < team->nthreads; i++) {
        free_comm(&team->workers[i].comm);
        free(team->workers[i].scratch);
    }
    free_comm(&team->caller_comm);
    mlc_guard_destroy(team);
    free(team->workers);
    free(team->fusion);
    free(team->caller_pack);
    free(team->caller_scratch);
    free(team->events);
    pthread_mutex_destroy(&team->lock);
    pthread_mutex_destroy(&team->caller_lock);
    pthread_cond_destroy(&team->work_cv);
    pthread_cond_destroy(&team->done_cv);
    pthread_cond_destroy(&team->ready_cv);
    free(team);
}

int mlc_team_set_algorithm(mlc_team *team, int algorithm) {
    if (algorithm < 0 || algorithm >= MLC_NUM_ALGORITHMS) return MLC_ERR_ARG;
    team->algorithm = algorithm;
    return MLC_OK;
}

int mlc_team_set_latency_threshold(mlc_team *team, int64_t bytes) {
    if (bytes < 0) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->caller_lock);
    int64_t old = team->latency_bytes;
    team->latency_bytes = bytes;
    int rc = resize_caller_buffers(team);
    if (rc) team->latency_bytes = old;
    pthread_mutex_unlock(&team->caller_lock);
    return rc;
}

int mlc_team_set_inline_threshold(mlc_team *team, int64_t bytes) {
    if (bytes < 0) return MLC_ERR_ARG;
    team->inline_bytes = bytes;
    return MLC_OK;
}

void mlc_team_get_settings(const mlc_team *team, mlc_team_settings *out) {
    out->nthreads = team->nthreads;
    out->algorithm = team->algorithm;
    out->chunk_bytes = team->chunk_bytes;
    out->fusion_bytes = team->window_segments * team->chunk_bytes;
    out->latency_bytes = team->latency_bytes;
    out->inline_bytes = team->inline_bytes;
    out->direct_bytes = team->guard.direct_bytes;
}

const char *mlc_team_last_error(mlc_team *team, char *buf, size_t len) {
    pthread_mutex_lock(&team->lock);
    snprintf(buf, len, "%s", team->last_error);
    pthread_mutex_unlock(&team->lock);
    return buf;
}

void mlc_team_get_stats(const mlc_team *team, mlc_team_stats *out) {
    pthread_mutex_lock((pthread_mutex_t *)&team->lock);
    *out = team->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&team->lock);
}

/* ---- requests ---- */

static int check_args(mlc_team *team, int kind, const mlc_tensor *tensors, int ntensors, int dtype,
                      int op, int root) {
    if (!team || ntensors < 0 || (ntensors > 0 && !tensors) || dtype < 0 || dtype >= MLC_NUM_DTYPES)
        return MLC_ERR_ARG;
    if (kind == MLC_KIND_ALLREDUCE && op != MLC_OP_SUM && op != MLC_OP_AVERAGE) return MLC_ERR_ARG;
    if (kind == MLC_KIND_BROADCAST && (root < 0 || root >= team->ctx->size)) return MLC_ERR_ARG;
    for (int i = 0; i < ntensors; i++)
        if (tensors[i].count < 0 || (tensors[i].count > 0 && !tensors[i].data)) return MLC_ERR_ARG;
    return MLC_OK;
}

/* Fill req, whose tensors/starts arrays the caller provides (heap or stack). */
static void fill_request(mlc_request *req, mlc_team *team, int kind, const mlc_tensor *tensors,
                         int ntensors, int dtype, int op, int root) {
    req->total = 0;
    for (int i = 0; i < ntensors; i++) {
        req->tensors[i] = tensors[i];
        req->starts[i] = req->total;
        req->total += tensors[i].count;
    }
    req->starts[ntensors] = req->total;
    req->team = team;
    req->kind = kind;
    req->ntensors = ntensors;
    req->dtype = dtype;
    req->op = op;
    req->root = root;
    req->part = 0;
    req->nparts = 1;
    req->call_dtypes = 0;
    req->algorithm = team->algorithm;
    if (req->algorithm == MLC_ALG_AUTO)
        req->algorithm = req->total * mlc_dtype_size(dtype) < team->latency_bytes
                             ? MLC_ALG_RECURSIVE_DOUBLING : MLC_ALG_RING;
}

static int make_request(mlc_team *team, int kind, const mlc_tensor *tensors, int ntensors, int dtype,
                        int op, int root, mlc_request **out) {
    *out = NULL;
    int rc = check_args(team, kind, tensors, ntensors, dtype, op, root);
    if (rc) return rc;
    mlc_request *req = calloc(1, sizeof *req);
    if (!req) return MLC_ERR_NOMEM;
    req->heap = 1;
    atomic_init(&req->ready_elems, 0);
    req->tensors = malloc((ntensors ? ntensors : 1) * sizeof *req->tensors);
    req->starts = malloc((ntensors + 1) * sizeof *req->starts);
    if (!req->tensors || !req->starts) {
        mlc_free_request(req);
        return MLC_ERR_NOMEM;
    }
    fill_request(req, team, kind, tensors, ntensors, dtype, op, root);
    *out = req;
    return MLC_OK;
}

void mlc_queue_request(mlc_team *team, mlc_request *req) {
    req->submitted_at = mlc_now();
    req->ready_at = req->submitted_at;
    req->workers_left = team->nthreads;
    req->seq = ++team->next_seq;
    if (mlc_guard_wants(team, req)) mlc_guard_register(team, req);
    if (team->tail) team->tail->next = req;
    else team->head = req;
    team->tail = req;
    atomic_store(&team->published_seq, req->seq);
    pthread_cond_broadcast(&team->work_cv);
}

int64_t mlc_request_segment_elems(const mlc_team *team, const mlc_request *req) {
    const int es = mlc_dtype_size(req->dtype);
    return mlc_segment_elems(req->total, team->chunk_bytes / es, team->nthreads, MLC_RING_BATCH,
                             MLC_MIN_SEGMENT_BYTES / es);
}

static int submit(mlc_team *team, mlc_request *req, mlc_callback cb, void *user, mlc_request **out) {
    req->callback = cb;
    req->user_data = user;
    req->detached = out == NULL;
    pthread_mutex_lock(&team->lock);
    if (team->shutting_down) {
        pthread_mutex_unlock(&team->lock);
        mlc_free_request(req);
        return MLC_ERR_STATE;
    }
    mlc_queue_request(team, req);
    pthread_mutex_unlock(&team->lock);
    if (out) *out = req;
    return MLC_OK;
}

int mlc_team_allreduce_async(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                             int op, mlc_callback callback, void *user_data, mlc_request **out) {
    mlc_request *req;
    int rc = make_request(team, MLC_KIND_ALLREDUCE, tensors, ntensors, dtype, op, 0, &req);
    return rc ? rc : submit(team, req, callback, user_data, out);
}

int mlc_team_broadcast_async(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                             int root, mlc_callback callback, void *user_data, mlc_request **out) {
    mlc_request *req;
    int rc = make_request(team, MLC_KIND_BROADCAST, tensors, ntensors, dtype, 0, root, &req);
    return rc ? rc : submit(team, req, callback, user_data, out);
}

int mlc_team_allreduce_async_part(mlc_team *team, const mlc_tensor *tensors, int ntensors,
                                  int dtype, int op, int part, int nparts, int call_dtypes,
                                  mlc_callback callback, void *user_data, mlc_request **out) {
    mlc_request *req;
    if (nparts < 1 || part < 0 || part >= nparts || call_dtypes < 0 || call_dtypes > 0xffff)
        return MLC_ERR_ARG;
    int rc = make_request(team, MLC_KIND_ALLREDUCE, tensors, ntensors, dtype, op, 0, &req);
    if (rc) return rc;
    req->part = part;
    req->nparts = nparts;
    req->call_dtypes = call_dtypes;
    return submit(team, req, callback, user_data, out);
}

/* Blocking requests up to these sizes run on the caller's thread (execute.c). */
static int runs_inline(const mlc_team *team, const mlc_request *req) {
    int64_t bytes = req->total * mlc_dtype_size(req->dtype);
    if (req->kind == MLC_KIND_BROADCAST || req->algorithm == MLC_ALG_RECURSIVE_DOUBLING)
        return bytes <= team->latency_bytes;
    return bytes <= team->inline_bytes;
}

/* Blocking form: small requests run inline, the rest go through the threads. */
static int run_blocking(mlc_team *team, mlc_request *req, char *err, size_t errlen) {
    int64_t bytes = req->total * mlc_dtype_size(req->dtype);
    int rc;
    /* Nothing to exchange: an empty allreduce, or one rank reducing in place. */
    int alone_in_place = team->ctx->size == 1 && req->kind == MLC_KIND_ALLREDUCE &&
                         req->ntensors == 1 && !req->tensors[0].source;
    /* ... unless the ranks must still agree on it (signature.c). */
    const int check = mlc_guard_wants(team, req);
    if (((bytes == 0 && req->kind == MLC_KIND_ALLREDUCE) || alone_in_place) && !check) {
        mlc_free_request(req);
        return MLC_OK;
    }
    if (runs_inline(team, req)) {
        double t0 = mlc_now();
        pthread_mutex_lock(&team->caller_lock);
        if (check) { /* a place in the team's order, as a queued request gets */
            pthread_mutex_lock(&team->lock);
            req->seq = ++team->next_seq;
            mlc_guard_register(team, req);
            pthread_mutex_unlock(&team->lock);
        }
        rc = mlc_execute_inline(team, req);
        if (rc) set_error(err, errlen, team->caller_message[0] ? team->caller_message : mlc_status_name(rc));
        pthread_mutex_unlock(&team->caller_lock);
        double dt = mlc_now() - t0;
        pthread_mutex_lock(&team->lock);
        team->stats.calls++;
        team->stats.bytes += bytes;
        team->stats.busy_seconds += dt;
        team->stats.wait_seconds += dt;
        team->stats.exposed_seconds += dt;
        due_report report = report_due(team);
        pthread_mutex_unlock(&team->lock);
        if (report.fn) report.fn(report.user, &report.stats);
        mlc_free_request(req);
        return rc;
    }
    mlc_request *handle;
    if ((rc = submit(team, req, NULL, NULL, &handle))) return rc;
    rc = mlc_request_wait(handle);
    if (rc) set_error(err, errlen, handle->message);
    mlc_request_free(handle);
    return rc;
}

int mlc_team_allreduce(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int op,
                       char *err, size_t errlen) {
    mlc_request *req;
    int rc = make_request(team, MLC_KIND_ALLREDUCE, tensors, ntensors, dtype, op, 0, &req);
    if (rc) {
        set_error(err, errlen, "invalid allreduce arguments (dtype, op, or tensor list)");
        return rc;
    }
    return run_blocking(team, req, err, errlen);
}

int mlc_team_allreduce_buffer(mlc_team *team, void *data, int64_t count, int dtype, int op, char *err,
                              size_t errlen) {
    mlc_tensor tensor = {data, NULL, count};
    int64_t starts[2];
    mlc_request local = {0};
    int rc = check_args(team, MLC_KIND_ALLREDUCE, &tensor, 1, dtype, op, 0);
    if (rc) {
        set_error(err, errlen, "invalid allreduce arguments (dtype, op, or buffer)");
        return rc;
    }
    local.tensors = &tensor;
    local.starts = starts;
    fill_request(&local, team, MLC_KIND_ALLREDUCE, &tensor, 1, dtype, op, 0);
    if (runs_inline(team, &local))
        return run_blocking(team, &local, err, errlen); /* inline: the stack request suffices */
    mlc_request *req; /* the threads need a request that outlives this frame's decisions */
    if ((rc = make_request(team, MLC_KIND_ALLREDUCE, &tensor, 1, dtype, op, 0, &req))) return rc;
    return run_blocking(team, req, err, errlen);
}

int mlc_team_broadcast(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int root,
                       char *err, size_t errlen) {
    return mlc_team_broadcast_part(team, tensors, ntensors, dtype, root, 0, 1, 0, err, errlen);
}

int mlc_team_broadcast_part(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                            int root, int part, int nparts, int call_dtypes, char *err,
                            size_t errlen) {
    mlc_request *req;
    int rc = nparts < 1 || part < 0 || part >= nparts || call_dtypes < 0 || call_dtypes > 0xffff
                 ? MLC_ERR_ARG
                 : make_request(team, MLC_KIND_BROADCAST, tensors, ntensors, dtype, 0, root, &req);
    if (rc) {
        set_error(err, errlen, "invalid broadcast arguments (dtype, root, part, or tensor list)");
        return rc;
    }
    req->part = part;
    req->nparts = nparts;
    req->call_dtypes = call_dtypes;
    return run_blocking(team, req, err, errlen);
}

int mlc_request_wait(mlc_request *req) {
    mlc_team *team = req->team;
    double t0 = mlc_now(), until = t0 + MLC_WAIT_SPIN_SECONDS;
    /* Poll first: a wake-up through the condition variable costs tens of
     * microseconds, as much as a whole small reduction. */
    while (!atomic_load(&req->finished) && mlc_now() < until) sched_yield();
    pthread_mutex_lock(&team->lock);
    while (!req->finished) pthread_cond_wait(&team->done_cv, &team->lock);
    team->stats.wait_seconds += mlc_now() - t0;
    int status = req->status;
    pthread_mutex_unlock(&team->lock);
    return status;
}

int mlc_request_test(mlc_request *req) {
    pthread_mutex_lock(&req->team->lock);
    int status = req->finished ? req->status : MLC_PENDING;
    pthread_mutex_unlock(&req->team->lock);
    return status;
}

const char *mlc_request_message(const mlc_request *req) { return req->message; }

void mlc_request_free(mlc_request *req) {
    if (req) mlc_free_request(req);
}
