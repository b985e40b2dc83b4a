/* Requests: one allreduce or broadcast of a list of tensors, planned once when it
 * is submitted (plan/plan.c), checked by the ranks' agreement (agree/) and
 * carried out by the team's threads or, for a blocking call the plan puts there,
 * on the caller's thread (execute.c). The public async, blocking, wait and test
 * entry points live here. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "team.h"

/* A caller blocked on a request polls this long before sleeping. */
#define MLC_WAIT_SPIN_SECONDS 200e-6

static void set_error(char *err, size_t errlen, const char *text) {
    if (err && errlen) snprintf(err, errlen, "%s", text);
}

void mlc_free_request(mlc_request *req) {
    if (!req->heap) return; /* a blocking call's request on its caller's stack */
    if (req->group) mlc_group_free(req->group);
    free(req->tensors);
    free(req->starts);
    free(req);
}

static int check_args(mlc_team *team, int kind, const mlc_tensor *tensors, int ntensors, int dtype,
                      int op, int root) {
    if (!team || ntensors < 0 || (ntensors > 0 && !tensors) || dtype < 0 || dtype >= MLC_NUM_DTYPES)
        return MLC_ERR_ARG;
    if (kind == MLC_KIND_ALLREDUCE && (op < 0 || op >= MLC_NUM_OPS || !mlc_dtype_is_reducible(dtype)))
        return MLC_ERR_ARG;
    if (kind == MLC_KIND_BROADCAST && (root < 0 || root >= team->ctx->size)) return MLC_ERR_ARG;
    for (int i = 0; i < ntensors; i++)
        if (tensors[i].count < 0 || (tensors[i].count > 0 && !tensors[i].data)) return MLC_ERR_ARG;
    return MLC_OK;
}

/* Under the team's lock: what the plan reads of a request of this shape and of the team. */
static mlc_plan_input plan_input(const mlc_team *team, int kind, int dtype, int op, int ntensors,
                                 int64_t total, int in_place, int is_group, int blocking) {
    return (mlc_plan_input){
        .kind = kind,
        .dtype = dtype,
        .ntensors = ntensors,
        .total = total,
        .in_place = in_place,
        .is_group = is_group,
        .blocking = blocking,
        .nranks = team->ctx->size,
        .checked = mlc_agree_wants(&team->agree, kind, dtype),
        .algorithm = team->config.algorithm,
        .nthreads = team->nthreads,
        .chunk_bytes = team->config.chunk_bytes,
        .window_segments = team->config.window_segments,
        .latency_bytes = team->config.latency_bytes,
        .rabenseifner_bytes = team->config.rabenseifner_bytes,
        .inline_bytes = team->config.inline_bytes,
        .direct_bytes = team->agree.direct_bytes,
        .compression = team->config.compression,
        .op = op,
        .submit_bytes = team->config.submit_bytes,
    };
}

int mlc_team_group_by_submit(mlc_team *team, int ntensors, const int64_t *counts, int dtype) {
    if (!team || ntensors < 1 || !counts || dtype < 0 || dtype >= MLC_NUM_DTYPES) return 0;
    int64_t total = 0;
    for (int i = 0; i < ntensors; i++) total += counts[i];
    mlc_plan plan;
    pthread_mutex_lock(&team->lock);
    const mlc_plan_input in = plan_input(team, MLC_KIND_ALLREDUCE, dtype, MLC_OP_AVERAGE, ntensors, total, 0, 1, 0);
    pthread_mutex_unlock(&team->lock);
    mlc_plan_make(&in, &plan);
    return plan.by_submit;
}

/* Under the team's lock (its settings). */
void mlc_plan_request(const mlc_team *team, mlc_request *req, int blocking) {
    const mlc_tensor *only = req->ntensors == 1 ? &req->tensors[0] : NULL;
    const mlc_plan_input in = plan_input(team, req->kind, req->dtype, req->op, req->ntensors, req->total,
                                         only && mlc_tensor_input(only) == only->data, req->group != NULL,
                                         blocking);
    req->sched.compression = team->config.compression;
    req->sched.team_algorithm = team->config.algorithm;
    req->sched.ksteps = team->config.ksteps;
    req->sched.max_steps = team->config.max_steps;
    req->fault.overflow_tensor = -1;
    req->fault.overflow_element = 0;
    mlc_plan_make(&in, &req->plan);
    req->span = req->total;
    if (req->plan.aligned) { /* large tensors start on segment boundaries */
        req->span = mlc_segment_aligned_starts(req->tensors, req->ntensors, req->plan.seg_elems, req->starts);
        req->plan.nseg = mlc_segment_count(req->span, req->plan.seg_elems);
    }
}

void mlc_fill_request(mlc_request *req, mlc_team *team, int kind, const mlc_tensor *tensors,
                         int ntensors, int dtype, int op, int root, int blocking) {
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
    pthread_mutex_lock(&team->lock); /* the settings the plan reads are written under it */
    mlc_plan_request(team, req, blocking);
    req->call = mlc_call_of(team);
    if (req->call.index || req->call.step) team->call.requests++; /* the calling thread's call made one */
    pthread_mutex_unlock(&team->lock);
}

static int make_request(mlc_team *team, int kind, const mlc_tensor *tensors, int ntensors, int dtype,
                        int op, int root, int blocking, mlc_request **out) {
    *out = NULL;
    int rc = check_args(team, kind, tensors, ntensors, dtype, op, root);
    if (rc) return rc;
    mlc_request *req = calloc(1, sizeof *req);
    if (!req) return MLC_ERR_NOMEM;
    req->heap = 1;
    req->tensors = malloc((ntensors ? ntensors : 1) * sizeof *req->tensors);
    req->starts = malloc((ntensors + 1) * sizeof *req->starts);
    if (!req->tensors || !req->starts) {
        mlc_free_request(req);
        return MLC_ERR_NOMEM;
    }
    mlc_fill_request(req, team, kind, tensors, ntensors, dtype, op, root, blocking);
    *out = req;
    return MLC_OK;
}

void mlc_sign_input_of(const mlc_team *team, const mlc_request *req, mlc_sign_input *in) {
    *in = (mlc_sign_input){.kind = req->kind, .dtype = req->dtype, .op = req->op,
                           .root = req->root, .ntensors = req->ntensors, .part = req->part,
                           .nparts = req->nparts, .is_group = req->group != NULL,
                           .call_dtypes = req->call_dtypes, .total = req->total,
                           .tensors = req->tensors, .starts = req->starts,
                           .direct = req->plan.direct, .nonfinite_tensor = -1,
                           .compression = req->sched.compression, .algorithm = req->plan.algorithm,
                           .team_algorithm = req->sched.team_algorithm, .on_caller = req->plan.on_caller,
                           .lanes = req->plan.lanes, .seg_elems = req->plan.seg_elems,
                           .ksteps = req->sched.ksteps, .max_steps = req->sched.max_steps,
                           .sizes_vary = req->rows.sizes_vary, .row_elements = req->rows.row_elements,
                           .row_ndim = req->rows.row_ndim, .row_shape = req->rows.row_shape,
                           .bad_args = req->fault.bad_args,
                           .bad_detail = {req->fault.bad_detail[0], req->fault.bad_detail[1]},
                           .cancelled = req->fault.cancelled, .sizes_count = req->rows.sizes_count,
                           .sizes_in = req->rows.sizes_in, .sizes_out = req->rows.sizes_out,
                           .rows_in = req->rows.rows_in, .rows_bytes = req->rows.rows_bytes,
                           .rows_capacity = req->rows.rows_out ? MLC_ROWS_CARRY_BYTES : 0,
                           .rows_out = req->rows.rows_out, .call = req->call};
    in->ahead_bytes = mlc_ahead_bytes_of(team, req, &in->ahead_own);
    if (req->fault.scanned_count) {
        in->nonfinite_tensor = req->fault.scanned_tensor;
        in->nonfinite_count = req->fault.scanned_count;
        return;
    }
    /* A keyed group's tensors are scanned as they arrive (group.c). */
    if (req->group || !team->agree.finite || req->kind != MLC_KIND_ALLREDUCE ||
        !mlc_dtype_is_float(req->dtype))
        return;
    for (int i = 0; i < req->ntensors; i++) {
        const mlc_tensor *t = &req->tensors[i];
        if (t->count > 0 && mlc_has_nonfinite(mlc_tensor_input(t), t->count, req->dtype)) {
            if (in->nonfinite_tensor < 0) in->nonfinite_tensor = i;
            in->nonfinite_count++;
        }
    }
}

/* Under the team lock: the request's place in the team's order, and in the
 * agreement check's. A keyed group's input is handed to the check later. */
static void take_seq(mlc_team *team, mlc_request *req, const mlc_sign_input *in) {
    req->seq = ++team->next_seq;
    team->last_request = (mlc_request_note){(int64_t)req->seq, req->kind, req->dtype, req->op, req->root,
                                            req->ntensors, req->group != NULL, req->total,
                                            mlc_group_key(req), req->rows.row_elements};
    if (!req->rows.covered && mlc_agree_wants(&team->agree, req->kind, req->dtype))
        mlc_agree_register(&team->agree, &req->agreement, (int64_t)req->seq, in);
}

void mlc_queue_request(mlc_team *team, mlc_request *req, const mlc_sign_input *ready) {
    req->end.submitted_at = mlc_now();
    req->end.ready_at = req->end.submitted_at;
    req->end.workers_left = team->nthreads;
    req->lanes_running = team->nthreads;
    take_seq(team, req, ready);
    if (team->tail) team->tail->next = req;
    else team->head = req;
    team->tail = req;
    atomic_store(&team->published_seq, req->seq);
    pthread_cond_broadcast(&team->work_cv);
}

static int submit(mlc_team *team, mlc_request *req, mlc_callback cb, void *user, mlc_request **out) {
    req->end.callback = cb;
    req->end.user_data = user;
    req->end.detached = out == NULL;
    mlc_sign_input in; /* outside the lock: the finite check scans the input */
    mlc_sign_input_of(team, req, &in);
    pthread_mutex_lock(&team->lock);
    if (team->shutting_down) {
        pthread_mutex_unlock(&team->lock);
        mlc_free_request(req);
        return MLC_ERR_STATE;
    }
    mlc_queue_request(team, req, &in);
    pthread_mutex_unlock(&team->lock);
    if (out) *out = req;
    return MLC_OK;
}

int mlc_team_allreduce_async(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                             int op, mlc_callback callback, void *user_data, mlc_request **out) {
    return mlc_team_allreduce_async_part(team, tensors, ntensors, dtype, op, 0, 1, 0, callback,
                                         user_data, out);
}

/* A call's place (part of nparts) and its dtypes (bits), as the signature carries them. */
static int bad_part(int part, int nparts, int call_dtypes) {
    return nparts < 1 || part < 0 || part >= nparts || call_dtypes < 0 ||
           call_dtypes >= (1 << MLC_NUM_DTYPES);
}

/* A root no rank has: on this rank alone it would fail here and leave the others waiting
 * in the broadcast, so the call goes out as a faulted request (faulted_request), which
 * every rank fails, naming this rank and its root. */
static int bad_root(const mlc_team *team, int root) { return root < 0 || root >= team->ctx->size; }

static int faulted_request(mlc_team *team, int kind, int dtype, int op, int root, int part, int nparts,
                           int call_dtypes, int blocking, int bad, const int64_t detail[2], char *err,
                           size_t errlen, mlc_request **out);

int mlc_team_broadcast_async(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                             int root, mlc_callback callback, void *user_data, mlc_request **out) {
    mlc_request *req;
    if (team && bad_root(team, root)) {
        const int64_t detail[2] = {root, team->ctx->size};
        char text[MLC_MSG_LEN];
        int rc = faulted_request(team, MLC_KIND_BROADCAST, dtype, 0, 0, 0, 1, 0, 0, MLC_BAD_ROOT, detail,
                                 text, sizeof text, &req);
        if (rc == MLC_OK) return submit(team, req, callback, user_data, out);
        pthread_mutex_lock(&team->lock); /* the caller reads why there (mlc_team_last_error) */
        snprintf(team->last_error, MLC_MSG_LEN, "%s", text);
        pthread_mutex_unlock(&team->lock);
        return rc;
    }
    int rc = make_request(team, MLC_KIND_BROADCAST, tensors, ntensors, dtype, 0, root, 0, &req);
    return rc ? rc : submit(team, req, callback, user_data, out);
}

int mlc_team_allreduce_async_part(mlc_team *team, const mlc_tensor *tensors, int ntensors,
                                  int dtype, int op, int part, int nparts, int call_dtypes,
                                  mlc_callback callback, void *user_data, mlc_request **out) {
    return mlc_team_allreduce_async_at(team, tensors, ntensors, dtype, op, part, nparts, call_dtypes, 0, 0,
                                       callback, user_data, out);
}

int mlc_team_allreduce_async_at(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                                int op, int part, int nparts, int call_dtypes, int64_t step,
                                int64_t index, mlc_callback callback, void *user_data,
                                mlc_request **out) {
    mlc_request *req;
    if (bad_part(part, nparts, call_dtypes) || step < 0 || index < 0) return MLC_ERR_ARG;
    int rc = make_request(team, MLC_KIND_ALLREDUCE, tensors, ntensors, dtype, op, 0, 0, &req);
    if (rc) return rc;
    if (step > 0) req->call = (mlc_call_id){step, index, 0, ""}; /* not yet seen by any thread */
    req->part = part;
    req->nparts = nparts;
    req->call_dtypes = call_dtypes;
    return submit(team, req, callback, user_data, out);
}

/* Blocking form: what the plan puts on the caller's thread runs here, in the
 * team's order; the rest goes through the threads. */
int mlc_run_blocking(mlc_team *team, mlc_request *req, char *err, size_t errlen) {
    int rc;
    if (req->plan.nothing) {
        mlc_free_request(req);
        return MLC_OK;
    }
    if (req->plan.on_caller) {
        double t0 = mlc_now();
        mlc_sign_input in;
        mlc_sign_input_of(team, req, &in);
        pthread_mutex_lock(&team->caller.lock);
        mlc_ahead_prepare(team, req);
        if (in.ahead_bytes > 0) in.ahead = &team->caller.ahead;
        pthread_mutex_lock(&team->lock);
        take_seq(team, req, &in);
        mlc_ahead_post(team, req, in.ahead_bytes);
        pthread_mutex_unlock(&team->lock);
        mlc_waits_caller(team->ctx->waits, +1); /* this thread is blocked inside ml_comm */
        rc = mlc_execute_inline(team, req);
        mlc_waits_caller(team->ctx->waits, -1);
        if (rc) set_error(err, errlen, team->caller.message[0] ? team->caller.message : mlc_status_name(rc));
        pthread_mutex_unlock(&team->caller.lock);
        mlc_account(team, req->total * mlc_dtype_size(req->dtype), mlc_now() - t0);
        mlc_free_request(req);
        return rc;
    }
    mlc_request *handle;
    if ((rc = submit(team, req, NULL, NULL, &handle))) return rc;
    rc = mlc_request_wait(handle);
    if (rc) set_error(err, errlen, handle->end.message);
    mlc_request_free(handle);
    return rc;
}

/* A request with no data, of the caller's call part (staged.c's fault and scan). */
static int empty_request(mlc_team *team, int kind, int dtype, int op, int root, int part, int nparts,
                         int call_dtypes, int blocking, mlc_request **out) {
    int rc = make_request(team, kind, NULL, 0, dtype, op, root, blocking, out);
    if (rc) return rc;
    (*out)->part = part;
    (*out)->nparts = nparts;
    (*out)->call_dtypes = call_dtypes;
    return MLC_OK;
}

/* An empty request signed with the caller's failed check (bad, detail: MLC_BAD_*), which
 * every rank's verdict fails, naming this rank; MLC_ERR_ARG and err saying why where no
 * exchange would carry it (the agreement check is off for it). */
static int faulted_request(mlc_team *team, int kind, int dtype, int op, int root, int part, int nparts,
                           int call_dtypes, int blocking, int bad, const int64_t detail[2], char *err,
                           size_t errlen, mlc_request **out) {
    if (!mlc_agree_wants(&team->agree, kind, dtype)) {
        char what[256];
        mlc_describe_bad_args(bad, detail, what, sizeof what);
        if (err && errlen)
            snprintf(err, errlen, "invalid %s arguments: rank %d: %s",
                     kind == MLC_KIND_BROADCAST ? "broadcast" : "allreduce", team->ctx->rank, what);
        return MLC_ERR_ARG;
    }
    int rc = empty_request(team, kind, dtype, op, root, part, nparts, call_dtypes, blocking, out);
    if (rc) return rc;
    (*out)->fault.bad_args = bad;
    (*out)->fault.bad_detail[0] = detail[0];
    (*out)->fault.bad_detail[1] = detail[1];
    return MLC_OK;
}

int mlc_run_faulted(mlc_team *team, int kind, int dtype, int op, int root, int part, int nparts,
                    int call_dtypes, int bad, const int64_t detail[2], char *err, size_t errlen) {
    mlc_request *req;
    int rc = faulted_request(team, kind, dtype, op, root, part, nparts, call_dtypes, 1, bad, detail, err,
                             errlen, &req);
    if (rc) return rc;
    rc = mlc_run_blocking(team, req, err, errlen);
    return rc ? rc : MLC_ERR_ARG; /* never OK: the verdict fails it */
}

int mlc_run_scanned(mlc_team *team, int dtype, int op, int part, int nparts, int call_dtypes, int tensor,
                    int count, char *err, size_t errlen) {
    mlc_request *req;
    int rc = empty_request(team, MLC_KIND_ALLREDUCE, dtype, op, 0, part, nparts, call_dtypes, 1, &req);
    if (rc) return rc;
    req->fault.scanned_tensor = tensor;
    req->fault.scanned_count = count;
    return mlc_run_blocking(team, req, err, errlen);
}

int mlc_team_allreduce(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int op,
                       char *err, size_t errlen) {
    return mlc_team_allreduce_part(team, tensors, ntensors, dtype, op, 0, 1, 0, err, errlen);
}

int mlc_team_allreduce_part(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                            int op, int part, int nparts, int call_dtypes, char *err,
                            size_t errlen) {
    mlc_request *req;
    int rc = bad_part(part, nparts, call_dtypes)
                 ? MLC_ERR_ARG
                 : make_request(team, MLC_KIND_ALLREDUCE, tensors, ntensors, dtype, op, 0, 1, &req);
    if (rc) {
        set_error(err, errlen, "invalid allreduce arguments (dtype, op, part, or tensor list)");
        return rc;
    }
    req->part = part;
    req->nparts = nparts;
    req->call_dtypes = call_dtypes;
    return mlc_run_blocking(team, req, err, errlen);
}

int mlc_team_allreduce_buffer(mlc_team *team, void *data, int64_t count, int dtype, int op, char *err,
                              size_t errlen) {
    return mlc_team_allreduce_into(team, NULL, data, count, dtype, op, 0, 0, err, errlen);
}

int mlc_team_allreduce_into(mlc_team *team, const void *source, void *data, int64_t count,
                            int dtype, int op, int call_dtypes, uint64_t shape, char *err,
                            size_t errlen) {
    mlc_tensor tensor = {data, source, count, shape, 0};
    int64_t starts[2];
    mlc_request local = {0};
    int rc = bad_part(0, 1, call_dtypes) ? MLC_ERR_ARG
                                         : check_args(team, MLC_KIND_ALLREDUCE, &tensor, 1, dtype, op, 0);
    if (rc) {
        set_error(err, errlen, "invalid allreduce arguments (dtype, op, or buffer)");
        return rc;
    }
    local.tensors = &tensor;
    local.starts = starts;
    mlc_fill_request(&local, team, MLC_KIND_ALLREDUCE, &tensor, 1, dtype, op, 0, 1);
    local.call_dtypes = call_dtypes;
    if (local.plan.on_caller || local.plan.nothing)
        return mlc_run_blocking(team, &local, err, errlen); /* the stack request suffices */
    mlc_request *req; /* the threads need a request that outlives this frame */
    if ((rc = make_request(team, MLC_KIND_ALLREDUCE, &tensor, 1, dtype, op, 0, 1, &req))) return rc;
    req->call_dtypes = call_dtypes;
    return mlc_run_blocking(team, req, err, errlen);
}

int mlc_team_broadcast(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int root,
                       char *err, size_t errlen) {
    return mlc_team_broadcast_part(team, tensors, ntensors, dtype, root, 0, 1, 0, err, errlen);
}

int mlc_team_broadcast_part(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype,
                            int root, int part, int nparts, int call_dtypes, char *err,
                            size_t errlen) {
    if (team && !bad_part(part, nparts, call_dtypes) && bad_root(team, root)) {
        const int64_t detail[2] = {root, team->ctx->size};
        return mlc_run_faulted(team, MLC_KIND_BROADCAST, dtype, 0, 0, part, nparts, call_dtypes,
                               MLC_BAD_ROOT, detail, err, errlen);
    }
    mlc_request *req;
    int rc = bad_part(part, nparts, call_dtypes)
                 ? MLC_ERR_ARG
                 : make_request(team, MLC_KIND_BROADCAST, tensors, ntensors, dtype, 0, root, 1, &req);
    if (rc) {
        set_error(err, errlen, "invalid broadcast arguments (dtype, root, part, or tensor list)");
        return rc;
    }
    req->part = part;
    req->nparts = nparts;
    req->call_dtypes = call_dtypes;
    return mlc_run_blocking(team, req, err, errlen);
}

int mlc_request_wait(mlc_request *req) {
    mlc_team *team = req->team;
    double t0 = mlc_now(), until = t0 + MLC_WAIT_SPIN_SECONDS;
    /* Poll first: a wake-up through the condition variable costs tens of
     * microseconds, as much as a whole small reduction. */
    while (!atomic_load(&req->end.finished) && mlc_now() < until) sched_yield();
    pthread_mutex_lock(&team->lock);
    if (!req->end.finished) { /* this thread is blocked inside ml_comm (agree/waits.c) */
        mlc_waits_caller(team->ctx->waits, +1);
        while (!req->end.finished) pthread_cond_wait(&team->done_cv, &team->lock);
        mlc_waits_caller(team->ctx->waits, -1);
    }
    team->report.stats.wait_seconds += mlc_now() - t0;
    int status = req->end.status;
    pthread_mutex_unlock(&team->lock);
    return status;
}

int mlc_request_test(mlc_request *req) {
    pthread_mutex_lock(&req->team->lock);
    int status = req->end.finished ? req->end.status : MLC_PENDING;
    pthread_mutex_unlock(&req->team->lock);
    return status;
}

const char *mlc_request_message(const mlc_request *req) { return req->end.message; }

int mlc_request_nonfinite(const mlc_request *req, int *rank, int *tensor) {
    const mlc_agreement *a = &req->agreement;
    if (rank) *rank = a->nonfinite_ranks ? a->nonfinite_rank : -1;
    if (tensor) *tensor = a->nonfinite_ranks ? a->nonfinite_tensor : -1;
    return a->nonfinite_ranks;
}

int mlc_request_stop_asked(const mlc_request *req) { return req ? req->agreement.stop_asked : 0; }

void mlc_request_free(mlc_request *req) {
    if (req) mlc_free_request(req);
}

int64_t mlc_team_last_request(mlc_team *team, char *buf, size_t len) {
    if (!team) return -1;
    pthread_mutex_lock(&team->lock);
    const mlc_request_note note = team->last_request;
    pthread_mutex_unlock(&team->lock);
    if (buf && len) buf[0] = '\0';
    if (note.seq == 0 || !buf || !len) return note.seq;
    const mlc_sign_input in = {.kind = note.kind, .dtype = note.dtype, .op = note.op, .root = note.root,
                               .ntensors = note.ntensors, .is_group = note.is_group, .total = note.total,
                               .key = note.key, .row_elements = note.row_elements};
    mlc_describe_input(&in, buf, len);
    return note.seq;
}

