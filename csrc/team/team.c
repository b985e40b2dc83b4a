/* Teams: persistent communication threads fed by one FIFO of requests.
 *
 * Every thread of a team takes every request, in queue order, and does its own
 * segments of it (execute.c). The request completes when its last thread is
 * done; that thread updates the stats, runs the callback and wakes waiters.
 * Requests complete in queue order (each thread finishes request k before it
 * starts k+1), so the finished request is always the head of the queue.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mpi_error.h"
#include "team.h"

/* A test build names its own function here, which can fail a thread's start
 * (tests/c/threads_test.c, built by tools/sanitizers.py). */
#ifdef MLC_PTHREAD_CREATE
int MLC_PTHREAD_CREATE(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg);
#else
#define MLC_PTHREAD_CREATE pthread_create
#endif

/* Idle threads poll this long before sleeping: a request that follows soon after
 * the previous one starts without a wake-up, and idle teams still use no CPU. */
#define MLC_IDLE_SPIN_SECONDS 50e-6

/* The caller's buffers: the latency path packs and receives whole buffers below
 * latency_bytes; the inline ring stages and receives a batch of segments. */
static int resize_caller_buffers(mlc_team *team) {
    int64_t ring = MLC_RING_BATCH * team->config.chunk_bytes + 64;
    int64_t bytes = team->config.latency_bytes > ring ? team->config.latency_bytes : ring;
    char *pack = realloc(team->caller.pack, bytes);
    if (!pack) return MLC_ERR_NOMEM;
    team->caller.pack = pack;
    team->caller.pack_bytes = bytes;
    char *scratch = realloc(team->caller.scratch, bytes);
    if (!scratch) return MLC_ERR_NOMEM;
    team->caller.scratch = scratch;
    team->caller.scratch_bytes = bytes;
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

/* A report to make once the team lock is released. */
typedef struct due_report {
    mlc_report_fn fn; /* NULL: none due */
    void *user;
    mlc_team_stats stats;
} due_report;

/* Under the team lock, after a reduction was counted. */
static due_report report_due(const mlc_team *team) {
    due_report r = {NULL, NULL, team->report.stats};
    if (team->report.fn && team->report.every > 0 && team->report.stats.calls % team->report.every == 0) {
        r.fn = team->report.fn;
        r.user = team->report.user;
    }
    return r;
}

int mlc_team_set_report(mlc_team *team, int64_t every, mlc_report_fn fn, void *user_data) {
    if (!team) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->lock);
    team->report.every = every;
    team->report.fn = fn;
    team->report.user = user_data;
    pthread_mutex_unlock(&team->lock);
    return MLC_OK;
}

static void finish_part(mlc_team *team, mlc_request *req, int status, const char *message) {
    due_report report = {NULL, NULL, {0}};
    pthread_mutex_lock(&team->lock);
    if (status != MLC_OK && req->end.status == MLC_OK) {
        req->end.status = status;
        snprintf(req->end.message, MLC_MSG_LEN, "%s", message[0] ? message : mlc_status_name(status));
        memcpy(team->last_error, req->end.message, MLC_MSG_LEN);
    }
    int last = --req->end.workers_left == 0;
    if (last && req->end.status == MLC_ERR_OVERFLOW) {
        /* Each lane stopped at its own first overflow: name the first of all, as every rank does. */
        mlc_overflow_message(req, req->end.message, MLC_MSG_LEN);
        memcpy(team->last_error, req->end.message, MLC_MSG_LEN);
    }
    if (last) {
        team->head = req->next; /* see the file comment: req is the head */
        if (!team->head) team->tail = NULL;
        team->report.stats.calls++;
        team->report.stats.bytes += req->total * mlc_dtype_size(req->dtype);
        double now = mlc_now();
        team->report.stats.busy_seconds += now - req->end.submitted_at;
        team->report.stats.exposed_seconds += now - req->end.ready_at;
        report = report_due(team);
        mlc_timeline_record(team, MLC_EVENT_REQUEST, -1, (int64_t)req->seq, req->ntensors,
                            req->total * mlc_dtype_size(req->dtype), req->end.submitted_at, now);
    }
    pthread_mutex_unlock(&team->lock);
    if (!last) return;
    if (report.fn) report.fn(report.user, &report.stats);
    if (req->group) mlc_group_finish(req);
    if (req->end.callback) req->end.callback(req->end.user_data, req->end.status);
    pthread_mutex_lock(&team->lock);
    int detached = req->end.detached;
    req->end.finished = 1;
    pthread_cond_broadcast(&team->done_cv);
    pthread_mutex_unlock(&team->lock);
    if (detached) mlc_free_request(req);
}

/* A blocking request that ran on its caller's thread is counted like a queued one. */
void mlc_account(mlc_team *team, int64_t bytes, double seconds) {
    pthread_mutex_lock(&team->lock);
    team->report.stats.calls++;
    team->report.stats.bytes += bytes;
    team->report.stats.busy_seconds += seconds;
    team->report.stats.wait_seconds += seconds;
    team->report.stats.exposed_seconds += seconds;
    due_report report = report_due(team);
    pthread_mutex_unlock(&team->lock);
    if (report.fn) report.fn(report.user, &report.stats);
}

static void *worker_main(void *arg) {
    mlc_worker *w = arg;
    mlc_request *req;
    mlc_thread_name_self(w->index);
    while ((req = next_request(w)) != NULL) {
        const int64_t slice_ns = atomic_load(&w->team->config.thread_slice_ns);
        if (slice_ns != w->slice_ns) { /* thread_slice.c says why */
            mlc_thread_request_slice(slice_ns);
            w->slice_ns = slice_ns;
        }
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
    team->config.chunk_bytes = chunk_bytes / 8 * 8;
    team->config.window_segments = (fusion_bytes + team->config.chunk_bytes - 1) / team->config.chunk_bytes;
    /* At least two slots per thread, so a thread's ring batch never shares a slot. */
    if (team->config.window_segments < (int64_t)nthreads * MLC_RING_BATCH)
        team->config.window_segments = (int64_t)nthreads * MLC_RING_BATCH;
    team->config.algorithm = MLC_ALG_AUTO;
    team->config.latency_bytes = MLC_DEFAULT_LATENCY_BYTES;
    team->config.inline_bytes = MLC_DEFAULT_INLINE_BYTES;
    team->config.rabenseifner_bytes = MLC_DEFAULT_RABENSEIFNER_BYTES;
    team->config.submit_bytes = MLC_DEFAULT_SUBMIT_BYTES;
    pthread_mutex_init(&team->lock, NULL);
    pthread_mutex_init(&team->caller.lock, NULL);
    mlc_device_init(team);
    pthread_cond_init(&team->work_cv, NULL);
    pthread_cond_init(&team->done_cv, NULL);
    pthread_cond_init(&team->groups.ready_cv, NULL);
    team->caller.comm = team->agree_comm = MPI_COMM_NULL;
    mlc_agree_init(&team->agree);
    mlc_agree_set_job(&team->agree, mlc_abort_job, NULL, ctx->waits);
    team->fusion = malloc(team->config.window_segments * team->config.chunk_bytes);
    team->caller.ahead.buf = malloc(MLC_RING_PIECE_BYTES);
    team->workers = calloc(nthreads, sizeof *team->workers);
    for (int i = 0; team->workers && i < nthreads; i++) team->workers[i].comm = MPI_COMM_NULL;
    if (!team->fusion || !team->caller.ahead.buf || resize_caller_buffers(team) != MLC_OK || !team->workers) {
        mlc_team_destroy(team);
        set_error(err, errlen, "out of memory allocating the team's buffers");
        return MLC_ERR_NOMEM;
    }
    int rc = dup_comm(ctx->comm, &team->caller.comm, err, errlen);
    if (rc == MLC_OK) rc = dup_comm(ctx->comm, &team->agree_comm, err, errlen);
    if (rc == MLC_OK) {
        mlc_tp tp;
        mlc_tp_mpi_open(&tp, &team->agree_comm, ctx->rank, ctx->size, NULL);
        if ((rc = mlc_agree_open(&team->agree, &tp)))
            set_error(err, errlen, "out of memory allocating the team's check buffers");
        mlc_tp_mpi_open(&team->caller.tp, &team->caller.comm, ctx->rank, ctx->size, team->caller.message);
        team->caller.tp.never_sleeps = 1;
        if (rc == MLC_OK && (rc = mlc_agree_set_ahead_endpoint(&team->agree, &team->caller.tp)))
            set_error(err, errlen, "out of memory allocating the team's check buffers");
    }
    for (int i = 0; i < nthreads && rc == MLC_OK; i++) {
        mlc_worker *w = &team->workers[i];
        w->team = team;
        w->index = i;
        w->scratch_bytes = MLC_RING_BATCH * team->config.chunk_bytes + 64;
        w->scratch = malloc(w->scratch_bytes);
        if (!w->scratch) rc = MLC_ERR_NOMEM;
        else rc = dup_comm(ctx->comm, &w->comm, err, errlen);
        mlc_tp_mpi_open(&w->tp, &w->comm, ctx->rank, ctx->size, w->message);
    }
    /* Threads start only once every communicator exists: a failure above leaves none running. */
    for (int i = 0; i < nthreads && rc == MLC_OK; i++) {
        if (MLC_PTHREAD_CREATE(&team->workers[i].thread, NULL, worker_main, &team->workers[i]) != 0) {
            set_error(err, errlen, "pthread_create failed for a communication thread");
            team->workers[i].thread = 0; /* destroy joins only those that started */
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

static int mpi_finalized(void) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    return finalized;
}

/* Messages still unreceived on a communicator being freed are stale: every rank has
 * left the session (faults/departure.py waits for all of them first), so nobody
 * will receive them, and no sender waits for them (a peer that sent a request's
 * first message, then ended the request unmatched when the session closed). MPI
 * keeps them queued under the communicator's context id, which a later
 * communicator may get again: there they would look like a peer waiting for this
 * rank (a departure check then aborts a healthy job) or be received as that
 * communicator's own. So they are received here, and dropped. At most
 * DRAIN_MAX_MESSAGES: a peer that kept sending (a fault elsewhere) must not keep
 * the free from returning. */
#define DRAIN_MAX_MESSAGES 4096
int mlc_comm_drain(MPI_Comm comm) {
    int drained = 0;
    for (; drained < DRAIN_MAX_MESSAGES; drained++) {
        int flag = 0;
        MPI_Message message;
        MPI_Status status;
        MPI_Count bytes = 0;
        if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &message, &status) != MPI_SUCCESS || !flag)
            break;
        if (MPI_Get_elements_x(&status, MPI_BYTE, &bytes) != MPI_SUCCESS || bytes < 0 || bytes > INT_MAX) break;
        char *sink = malloc(bytes > 0 ? (size_t)bytes : 1);
        if (!sink) break;
        MPI_Mrecv(sink, (int)bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
        free(sink);
    }
    return drained;
}

static void free_comm(MPI_Comm *comm) {
    if (*comm == MPI_COMM_NULL || mpi_finalized()) return;
    mlc_comm_drain(*comm);
    MPI_Comm_free(comm);
}

void mlc_team_destroy(mlc_team *team) {
    if (!team) return;
    pthread_mutex_lock(&team->lock);
    team->shutting_down = 1; /* threads finish what is queued, then leave */
    pthread_cond_broadcast(&team->work_cv);
    pthread_cond_broadcast(&team->groups.ready_cv); /* groups still missing tensors fail */
    pthread_mutex_unlock(&team->lock);
    mlc_agree_shutdown(&team->agree);
    for (int i = 0; team->workers && i < team->nthreads; i++)
        if (team->workers[i].thread) pthread_join(team->workers[i].thread, NULL);
    /* Every lane's communicator is freed below, also of lanes whose thread never
     * started. Holders (a framework op between its acquire and release) finish
     * quickly now: each call on a shut-down team fails at once. */
    pthread_mutex_lock(&team->lock);
    while (team->users > 0) pthread_cond_wait(&team->done_cv, &team->lock);
    pthread_mutex_unlock(&team->lock);
    for (int i = 0; team->workers && i < team->nthreads; i++) {
        free_comm(&team->workers[i].comm);
        free(team->workers[i].scratch);
    }
    mlc_ahead_close(team, team->caller.comm != MPI_COMM_NULL && !mpi_finalized());
    free_comm(&team->caller.comm);
    if (team->agree_comm != MPI_COMM_NULL && !mpi_finalized()) mlc_agree_cancel(&team->agree);
    free_comm(&team->agree_comm);
    mlc_agree_destroy(&team->agree);
    free(team->workers);
    free(team->fusion);
    free(team->caller.pack);
    free(team->caller.scratch);
    free(team->caller.rows_staging.data);
    free(team->timeline.events);
    mlc_device_destroy(team);
    pthread_mutex_destroy(&team->lock);
    pthread_mutex_destroy(&team->caller.lock);
    pthread_cond_destroy(&team->work_cv);
    pthread_cond_destroy(&team->done_cv);
    pthread_cond_destroy(&team->groups.ready_cv);
    free(team);
}

/* Settings are written under the team's lock: the plan reads them under it. */
#define LOCKED_WRITE(team, stmt)           \
    do {                                   \
        pthread_mutex_lock(&(team)->lock); \
        stmt;                              \
        pthread_mutex_unlock(&(team)->lock); \
    } while (0)

int mlc_team_set_algorithm(mlc_team *team, int algorithm) {
    if (!team || algorithm < 0 || algorithm >= MLC_NUM_ALGORITHMS) return MLC_ERR_ARG;
    LOCKED_WRITE(team, team->config.algorithm = algorithm);
    return MLC_OK;
}

int mlc_team_set_schedule(mlc_team *team, int algorithm, int64_t ksteps, int64_t max_steps) {
    if (!team || algorithm < 0 || algorithm >= MLC_NUM_ALGORITHMS || max_steps < 0) return MLC_ERR_ARG;
    LOCKED_WRITE(team, (team->config.algorithm = algorithm, team->config.ksteps = ksteps, team->config.max_steps = max_steps));
    return MLC_OK;
}

int mlc_team_set_compression(mlc_team *team, int compression) {
    if (!team || compression < 0 || compression >= MLC_NUM_COMPRESSIONS) return MLC_ERR_ARG;
    LOCKED_WRITE(team, team->config.compression = compression);
    return MLC_OK;
}

int mlc_team_set_latency_threshold(mlc_team *team, int64_t bytes) {
    if (!team || bytes < 0) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->caller.lock);
    int64_t old = team->config.latency_bytes;
    LOCKED_WRITE(team, team->config.latency_bytes = bytes);
    int rc = resize_caller_buffers(team);
    if (rc) LOCKED_WRITE(team, team->config.latency_bytes = old);
    pthread_mutex_unlock(&team->caller.lock);
    return rc;
}

int mlc_team_set_rabenseifner_threshold(mlc_team *team, int64_t bytes) {
    if (!team || bytes < 0) return MLC_ERR_ARG;
    LOCKED_WRITE(team, team->config.rabenseifner_bytes = bytes);
    return MLC_OK;
}

int mlc_team_set_inline_threshold(mlc_team *team, int64_t bytes) {
    if (!team || bytes < 0) return MLC_ERR_ARG;
    LOCKED_WRITE(team, team->config.inline_bytes = bytes);
    return MLC_OK;
}

int mlc_team_set_submit_threshold(mlc_team *team, int64_t bytes) {
    if (!team || bytes < 0) return MLC_ERR_ARG;
    LOCKED_WRITE(team, team->config.submit_bytes = bytes);
    return MLC_OK;
}

int mlc_team_agreement_counts(mlc_team *team, int64_t *messages, int64_t *checks) {
    if (!team) return MLC_ERR_ARG;
    mlc_agree_counts(&team->agree, messages, checks);
    return MLC_OK;
}

int mlc_team_acquire(mlc_team *team) {
    if (!team) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->lock);
    int rc = team->shutting_down ? MLC_ERR_STATE : MLC_OK;
    if (rc == MLC_OK) team->users++;
    pthread_mutex_unlock(&team->lock);
    return rc;
}

void mlc_team_release(mlc_team *team) {
    if (!team) return;
    pthread_mutex_lock(&team->lock);
    if (--team->users == 0) pthread_cond_broadcast(&team->done_cv);
    pthread_mutex_unlock(&team->lock);
}

void mlc_team_get_settings(const mlc_team *team, mlc_team_settings *out) {
    pthread_mutex_lock((pthread_mutex_t *)&team->lock);
    out->nthreads = team->nthreads;
    out->algorithm = team->config.algorithm;
    out->chunk_bytes = team->config.chunk_bytes;
    out->fusion_bytes = team->config.window_segments * team->config.chunk_bytes;
    out->latency_bytes = team->config.latency_bytes;
    out->inline_bytes = team->config.inline_bytes;
    out->direct_bytes = team->agree.direct_bytes;
    out->compression = team->config.compression;
    out->rabenseifner_bytes = team->config.rabenseifner_bytes;
    out->submit_bytes = team->config.submit_bytes;
    pthread_mutex_unlock((pthread_mutex_t *)&team->lock);
}

const char *mlc_team_last_error(mlc_team *team, char *buf, size_t len) {
    pthread_mutex_lock(&team->lock);
    snprintf(buf, len, "%s", team->last_error);
    pthread_mutex_unlock(&team->lock);
    return buf;
}

void mlc_team_get_stats(const mlc_team *team, mlc_team_stats *out) {
    pthread_mutex_lock((pthread_mutex_t *)&team->lock);
    *out = team->report.stats;
    pthread_mutex_unlock((pthread_mutex_t *)&team->lock);
    out->thread_cpu_seconds = 0;
    for (int i = 0; i < team->nthreads; i++) {
        clockid_t clock;
        struct timespec used;
        if (pthread_getcpuclockid(team->workers[i].thread, &clock) == 0 &&
            clock_gettime(clock, &used) == 0)
            out->thread_cpu_seconds += (double)used.tv_sec + used.tv_nsec * 1e-9;
    }
}


/* ---- the agreement check's settings (agree/) ---- */

int mlc_team_set_checks(mlc_team *team, int layout, int finite) {
    if (!team) return MLC_ERR_ARG;
    LOCKED_WRITE(team, mlc_agree_set_checks(&team->agree, layout, finite));
    return MLC_OK;
}

int mlc_team_set_id(mlc_team *team, int id) {
    if (!team || id < 0) return MLC_ERR_ARG;
    mlc_agree_set_team_id(&team->agree, id);
    return MLC_OK;
}

int mlc_team_set_direct_threshold(mlc_team *team, int64_t bytes) {
    if (!team) return MLC_ERR_ARG;
    return mlc_agree_set_direct_bytes(&team->agree, bytes);
}

int mlc_team_set_stall_limits(mlc_team *team, double warn_seconds, double abort_seconds) {
    /* !(x >= 0) also refuses NaN */
    if (!team || !(warn_seconds >= 0) || !(abort_seconds >= 0)) return MLC_ERR_ARG;
    mlc_agree_set_stall_limits(&team->agree, warn_seconds, abort_seconds);
    return MLC_OK;
}

int mlc_team_set_thread_slice(mlc_team *team, int64_t ns) {
    if (!team || ns < 0) return MLC_ERR_ARG;
    atomic_store(&team->config.thread_slice_ns, ns);
    return MLC_OK;
}

int mlc_team_set_thread_cores(mlc_team *team, const int *cores, int ncores) {
    if (!team || ncores < 0 || (ncores > 0 && !cores)) return MLC_ERR_ARG;
    if (ncores == 0) return MLC_OK; /* the threads keep the affinity they inherited */
    /* From the caller's thread, at once: the team's threads exist from mlc_team_create
     * on, and a thread's affinity may be set from another (thread_cores.c says how). */
    for (int i = 0; i < team->nthreads; i++) {
        int rc = mlc_thread_set_cores(team->workers[i].thread, cores, ncores);
        if (rc != MLC_OK) return rc;
    }
    return MLC_OK;
}

int mlc_team_request_stop(mlc_team *team) {
    if (!team) return MLC_ERR_ARG;
    mlc_agree_request_stop(&team->agree); /* async-signal-safe: a handler may call it */
    return MLC_OK;
}

int64_t mlc_team_stop_seq(const mlc_team *team) {
    return team ? mlc_agree_stop_seq((mlc_agree *)&team->agree) : -1;
}
