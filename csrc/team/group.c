/* Keyed groups: one fused reduction whose tensors arrive one at a time.
 *
 * A framework op per gradient calls mlc_team_group_arrive(key, index, ...) as soon
 * as its gradient exists. The first arrival of a key opens a request with the
 * whole layout (every tensor's count) and queues it on the team at once, so the
 * threads start on the leading segments while later tensors are still being
 * computed: a segment is reduced when every tensor overlapping it has arrived,
 * and each tensor's done callback runs when every segment overlapping it is back.
 * Arrival order within a group does not matter; the layout is fixed by the counts.
 * Ranks agree because groups of one key are queued in step order: a key has at
 * most one group per step, and an arrival joins the oldest open group of its key
 * that still lacks its index. The request is not finished (and freed) before its
 * last tensor arrived, even when the last ones are empty and so add no data.
 * With the finite check, each arrival scans its own tensor, and the last hands
 * the finished input to the agreement check. A lane that waits for its segment's
 * tensors notes the end it needs, and only the arrival that completes them (or the
 * group) wakes the lanes: a gradient that completes nothing a lane waits for costs
 * its producer no context switch. A caller may also watch a group it opened
 * (mlc_team_group_watch): told of each tensor once it is reduced, before the seal,
 * it copies results out while later segments are still on the wire.
 *
 * A framework may open the group at its step's start instead, before any tensor
 * (mlc_team_group_open_part): then a step that fails before its first tensor
 * still has a group to cancel (mlc_team_group_cancel_opened), and the other ranks
 * fail that step too instead of meeting this rank's next step with it. The tensors
 * must not wait for that opener: an executor may run it late (TensorFlow with one
 * inter-op thread runs a step's ops depth first, an op with no inputs after the
 * whole backprop), and tensors waiting for it would all arrive at the end, with
 * nothing left to overlap. So each group carries its step's id: a tensor joins
 * only its own step's group, opening it if it came first, and the opener then
 * claims that group, or, when the group is complete already, opens nothing.
 *
 * A step that fails after some of its tensors arrived (a framework op raised)
 * cancels its open group: the group leaves the open list, so the next step's
 * tensors open a group of their own, and its missing tensors arrive as zeros, so
 * that this rank's lanes carry the request to its end in step with the other
 * ranks (their messages are posted already) and every communicator is left with
 * nothing in flight. The request fails on this rank. A tensor of the failed step
 * whose op was running already may arrive after the cancel: it fails too, and
 * opens no second group of its step (that group would meet the other ranks' next
 * request, and every request after it would pair off). At more than one rank a
 * group hands its tensors back only after its seal (seal.c), which tells every
 * rank whether some rank cancelled it: then it fails on every rank, in the same
 * step, naming those ranks, and no rank returns the zero-filled sums. The
 * cancelled flag is also signed: with the finite check, whose signature waits for
 * the last tensor, the cancelled group's own agreement check fails instead.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "team.h"

#define MLC_READY_SPIN_SECONDS 50e-6

struct mlc_group {
    int64_t key;
    int64_t step; /* the framework's step id (0: none): a tensor joins its own step's group */
    int claimed;  /* its step's opener opened or claimed it */
    int ntensors;
    int narrived, next_missing;  /* under the team lock */
    unsigned char *arrived;      /* per tensor */
    _Atomic int64_t ready_elems; /* elements [0, ready_elems) may be read */
    int64_t wake_at;             /* under the team lock: the least end a waiting lane needs */
    _Atomic int *segs_left;      /* per tensor: segments still to reduce */
    mlc_callback *tensor_done;
    void **tensor_user;
    mlc_ready_callback tensor_ready; /* mlc_team_group_watch: a tensor reduced, before the seal */
    void *ready_user;
    int nonfinite_tensor, nonfinite_count; /* the finite check's scan so far */
    void **zeros;                          /* per tensor: what a cancelled group filled in */
    int hold;                              /* done callbacks wait for the seal (seal.c) */
    mlc_request *next_open;                /* team->groups.open */
};

void mlc_group_free(mlc_group *g) {
    for (int i = 0; g->zeros && i < g->ntensors; i++) free(g->zeros[i]);
    free(g->zeros);
    free(g->arrived);
    free(g->segs_left);
    free(g->tensor_done);
    free(g->tensor_user);
    free(g);
}

static mlc_group *new_group(int64_t key, int ntensors) {
    mlc_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->key = key;
    g->ntensors = ntensors;
    g->nonfinite_tensor = -1;
    g->arrived = calloc(ntensors, 1);
    g->segs_left = calloc(ntensors, sizeof *g->segs_left);
    g->tensor_done = calloc(ntensors, sizeof *g->tensor_done);
    g->tensor_user = calloc(ntensors, sizeof *g->tensor_user);
    if (!g->arrived || !g->segs_left || !g->tensor_done || !g->tensor_user) {
        mlc_group_free(g);
        return NULL;
    }
    atomic_init(&g->ready_elems, 0);
    g->wake_at = INT64_MAX;
    return g;
}

static int same_layout(const mlc_request *req, int ntensors, const int64_t *counts,
                       const uint64_t *shapes, const uint64_t *labels, int dtype, int op) {
    if (req->ntensors != ntensors || req->dtype != dtype || req->op != op) return 0;
    for (int i = 0; i < ntensors; i++)
        if (req->tensors[i].count != counts[i] || req->tensors[i].shape != (shapes ? shapes[i] : 0) ||
            req->tensors[i].label != (labels ? labels[i] : 0))
            return 0;
    return 1;
}

static mlc_request *open_group(mlc_team *team, int64_t key, int ntensors, const int64_t *counts,
                               const uint64_t *shapes, const uint64_t *labels, int dtype, int op, int part, int nparts,
                               int call_dtypes) {
    mlc_request *req = calloc(1, sizeof *req);
    if (!req) return NULL;
    req->heap = 1;
    req->tensors = calloc(ntensors, sizeof *req->tensors);
    req->starts = calloc(ntensors + 1, sizeof *req->starts);
    req->group = new_group(key, ntensors);
    if (!req->tensors || !req->starts || !req->group) {
        mlc_free_request(req);
        return NULL;
    }
    for (int i = 0; i < ntensors; i++) {
        req->tensors[i].count = counts[i];
        req->tensors[i].shape = shapes ? shapes[i] : 0;
        req->tensors[i].label = labels ? labels[i] : 0;
        req->starts[i] = req->total;
        req->total += counts[i];
    }
    req->starts[ntensors] = req->total;
    req->team = team;
    req->kind = MLC_KIND_ALLREDUCE;
    req->ntensors = ntensors;
    req->dtype = dtype;
    req->op = op;
    req->part = part;
    req->nparts = nparts;
    req->call_dtypes = call_dtypes;
    req->end.detached = 1;
    mlc_plan_request(team, req, 0);
    const int64_t seg = req->plan.seg_elems;
    for (int i = 0; i < ntensors; i++) {
        int64_t first = req->starts[i] / seg, last = (req->starts[i] + counts[i] - 1) / seg;
        atomic_init(&req->group->segs_left[i], counts[i] ? (int)(last - first + 1) : 0);
    }
    req->group->hold = mlc_seal_wanted(req);
    return req;
}

/* The group's input for the agreement check, once known: at opening without the
 * finite check, after the last arrival with it. */
static void sign_input(const mlc_team *team, const mlc_request *req, mlc_sign_input *in) {
    mlc_sign_input_of(team, req, in); /* layout only: tensors may not have arrived */
    in->nonfinite_tensor = req->group->nonfinite_tensor;
    in->nonfinite_count = req->group->nonfinite_count;
}

/* Under the team lock: tensor index is in place; the group leaves the open list
 * once complete (no later arrival may join it). Returns 1 when the group's last tensor
 * came or its ready prefix reached the end a waiting lane needs (ready_else_wanted):
 * then the caller wakes the lanes on groups.ready_cv. Else no waiter's condition holds
 * yet, and a wake would only cost the arriving thread the lanes' context switches (per
 * gradient, on a node whose compute and threads share cores). */
static int mark_arrived(mlc_team *team, mlc_request *req, int index) {
    mlc_group *g = req->group;
    const int missing_before = g->next_missing;
    g->arrived[index] = 1;
    g->narrived++;
    while (g->next_missing < req->ntensors && g->arrived[g->next_missing]) g->next_missing++;
    atomic_store(&g->ready_elems, req->starts[g->next_missing]);
    if (g->narrived == req->ntensors) {
        mlc_request **link = &team->groups.open;
        while (*link != req) link = &(*link)->group->next_open;
        *link = g->next_open;
        if (!g->claimed && g->step != 0) { /* its step's opener, if it comes, opens nothing */
            const int at = team->groups.completed_unclaimed_next++ % MLC_UNCLAIMED_RING;
            team->groups.completed_unclaimed[at].key = g->key;
            team->groups.completed_unclaimed[at].step = g->step;
        }
        if (team->agree.finite && mlc_agree_wants(&team->agree, req->kind, req->dtype)) {
            mlc_sign_input in;
            sign_input(team, req, &in);
            mlc_agree_ready(&team->agree, &req->agreement, &in);
        }
        return 1;
    }
    if (g->next_missing == missing_before || atomic_load(&g->ready_elems) < g->wake_at) return 0;
    g->wake_at = INT64_MAX; /* the lanes that wake and still wait say their ends again */
    return 1;
}

/* Under the team lock: fail the open group req on this rank, its missing tensors
 * taken as zeros so that its lanes carry it to its end in step with the other ranks. */
static int cancel_group(mlc_team *team, mlc_request *req) {
    mlc_group *g = req->group;
    const int es = mlc_dtype_size(req->dtype);
    int nomem = !(g->zeros = calloc(req->ntensors, sizeof *g->zeros));
    for (int i = 0; !nomem && i < req->ntensors; i++)
        if (!g->arrived[i] && req->tensors[i].count > 0)
            nomem = !(g->zeros[i] = calloc(req->tensors[i].count, es));
    if (nomem) { /* left open as it was: nothing changed but the buffers freed */
        for (int i = 0; g->zeros && i < req->ntensors; i++) free(g->zeros[i]);
        free(g->zeros);
        g->zeros = NULL;
        return MLC_ERR_NOMEM;
    }
    req->fault.cancelled = 1; /* before the zeros arrive: the seal reads it after them */
    if (g->step != 0) {
        mlc_group_step *at = &team->groups.cancelled[team->groups.cancelled_next++ % MLC_CANCELLED_RING];
        at->key = g->key;
        at->step = g->step;
    }
    if (req->end.status == MLC_OK) {
        req->end.status = MLC_ERR_STATE;
        snprintf(req->end.message, MLC_MSG_LEN,
                 "team %d request %lld (keyed group %lld) was cancelled: the step that submitted "
                 "it failed on this rank",
                 team->agree.dog.team_id, (long long)req->seq, (long long)g->key);
        memcpy(team->last_error, req->end.message, MLC_MSG_LEN);
    }
    for (int i = 0; i < req->ntensors; i++) {
        if (g->arrived[i]) continue;
        req->tensors[i].data = g->zeros[i];
        req->tensors[i].source = NULL;
        if (mark_arrived(team, req, i)) pthread_cond_broadcast(&team->groups.ready_cv);
    }
    return MLC_OK;
}

int mlc_team_group_cancel(mlc_team *team, int64_t key, int index, const void *user_data) {
    if (!team) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->lock);
    mlc_request *req = team->groups.open;
    while (req && !(req->group->key == key && index >= 0 && index < req->ntensors &&
                    req->group->arrived[index] && req->group->tensor_user[index] == user_data))
        req = req->group->next_open;
    /* NULL: complete already (it finishes on its own), or never opened */
    const int rc = req ? cancel_group(team, req) : MLC_ERR_STATE;
    pthread_mutex_unlock(&team->lock);
    return rc;
}

/* Under the team lock: the open group that this opener id opened, or NULL. */
static mlc_request *opened_by(mlc_team *team, int64_t opener) {
    mlc_request *req = team->groups.open;
    while (req && (int64_t)req->seq != opener) req = req->group->next_open;
    return req;
}

int mlc_team_group_cancel_opened(mlc_team *team, int64_t opener) {
    if (!team) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->lock);
    mlc_request *req = opened_by(team, opener);
    const int rc = req ? cancel_group(team, req) : MLC_ERR_STATE;
    pthread_mutex_unlock(&team->lock);
    return rc;
}

int mlc_team_group_watch(mlc_team *team, int64_t opener, mlc_ready_callback ready, void *user_data) {
    if (!team || !ready) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->lock);
    mlc_request *req = opened_by(team, opener);
    if (req) {
        req->group->tensor_ready = ready;
        req->group->ready_user = user_data;
    }
    pthread_mutex_unlock(&team->lock);
    return req ? MLC_OK : MLC_ERR_STATE;
}

static int bad_arguments(const mlc_team *team, int ntensors, const int64_t *counts, int dtype,
                         int op, int part, int nparts, int call_dtypes, int index, const void *data,
                         char *err, size_t errlen) {
    const char *what = NULL;
    if (!team) what = "no team";
    else if (nparts < 1 || part < 0 || part >= nparts) what = "part is outside 0..nparts-1";
    else if (call_dtypes < 0 || call_dtypes >= (1 << MLC_NUM_DTYPES)) what = "call_dtypes has unknown bits";
    else if (ntensors < 1 || !counts) what = "a group needs at least one tensor";
    else if (index < 0 || index >= ntensors) what = "the index is outside the group";
    else if (dtype < 0 || dtype >= MLC_NUM_DTYPES) what = "unknown dtype";
    else if (!mlc_dtype_is_reducible(dtype)) what = "a dtype that is never reduced (bool)";
    else if (op != MLC_OP_SUM && op != MLC_OP_AVERAGE) what = "unknown reduction op";
    for (int i = 0; !what && i < ntensors; i++)
        if (counts[i] < 0) what = "a tensor count is negative";
    if (!what && counts[index] > 0 && !data) what = "a non-empty tensor needs a data buffer";
    if (!what) return 0;
    snprintf(err, errlen, "mlc_team_group_arrive: invalid arguments (index %d of %d): %s", index,
             ntensors, what);
    return 1;
}

/* Under the team lock: a new group appended at *link, the end of the open list (which
 * keeps step order), and queued; NULL: out of memory. */
static mlc_request *open_and_queue(mlc_team *team, mlc_request **link, int64_t key, int ntensors,
                                   const int64_t *counts, const uint64_t *shapes, const uint64_t *labels, int dtype, int op,
                                   int part, int nparts, int call_dtypes, int64_t step, int claimed) {
    mlc_request *req = open_group(team, key, ntensors, counts, shapes, labels, dtype, op, part, nparts, call_dtypes);
    if (!req) return NULL;
    req->group->step = step;
    req->group->claimed = claimed;
    *link = req;
    mlc_sign_input in;
    if (!team->agree.finite) sign_input(team, req, &in);
    mlc_queue_request(team, req, team->agree.finite ? NULL : &in);
    return req;
}

/* Under the team lock: this rank cancelled this step's group of key. */
static int cancelled_here(const mlc_team *team, int64_t key, int64_t step) {
    for (int i = 0; step != 0 && i < MLC_CANCELLED_RING; i++)
        if (team->groups.cancelled[i].key == key && team->groups.cancelled[i].step == step) return 1;
    return 0;
}

/* Under the team lock: this step's group of key already complete, unclaimed (forgotten
 * once found: a step has one opener per group). */
static int completed_unclaimed(mlc_team *team, int64_t key, int64_t step) {
    for (int i = 0; i < MLC_UNCLAIMED_RING; i++) {
        if (team->groups.completed_unclaimed[i].key != key || team->groups.completed_unclaimed[i].step != step) continue;
        team->groups.completed_unclaimed[i].step = 0;
        return 1;
    }
    return 0;
}

int mlc_team_group_open_part(mlc_team *team, int64_t key, int ntensors, const int64_t *counts,
                             const uint64_t *shapes, const uint64_t *labels, int dtype, int op, int part, int nparts, int call_dtypes, int64_t step, int64_t *opener,
                             char *err, size_t errlen) {
    if (!opener) {
        snprintf(err, errlen, "mlc_team_group_open_part: no place for the opener id");
        return MLC_ERR_ARG;
    }
    *opener = 0;
    if (bad_arguments(team, ntensors, counts, dtype, op, part, nparts, call_dtypes, 0, opener, err, errlen))
        return MLC_ERR_ARG;
    if (step == 0) {
        snprintf(err, errlen, "mlc_team_group_open_part: step 0 (an opener needs its step's id)");
        return MLC_ERR_ARG;
    }
    pthread_mutex_lock(&team->lock);
    if (team->shutting_down) {
        pthread_mutex_unlock(&team->lock);
        snprintf(err, errlen, "the team is shut down (ml_comm.finalize() was called)");
        return MLC_ERR_STATE;
    }
    /* A tensor of this step came first and opened the group: claim it. */
    mlc_request **link = &team->groups.open;
    for (; *link; link = &(*link)->group->next_open) {
        mlc_group *g = (*link)->group;
        if (g->key != key || g->step != step || g->claimed) continue;
        g->claimed = 1;
        *opener = (int64_t)(*link)->seq;
        pthread_mutex_unlock(&team->lock);
        return MLC_OK;
    }
    if (completed_unclaimed(team, key, step) || cancelled_here(team, key, step)) {
        /* every tensor of the step came first, or the step failed already */
        pthread_mutex_unlock(&team->lock);
        return MLC_OK;
    }
    mlc_request *req = open_and_queue(team, link, key, ntensors, counts, shapes, labels, dtype, op, part, nparts,
                                      call_dtypes, step, 1);
    if (req) *opener = (int64_t)req->seq;
    pthread_mutex_unlock(&team->lock);
    if (req) return MLC_OK;
    snprintf(err, errlen, "out of memory opening a group of %d tensors", ntensors);
    return MLC_ERR_NOMEM;
}

int mlc_team_group_arrive(mlc_team *team, int64_t key, int ntensors, const int64_t *counts, int dtype,
                          int op, int index, const void *source, void *data, mlc_callback done,
                          void *user_data, char *err, size_t errlen) {
    return mlc_team_group_arrive_part(team, key, ntensors, counts, NULL, NULL, dtype, op, 0, 1, 0, index, 0,
                                      source, data, done, user_data, err, errlen);
}

int mlc_team_group_arrive_part(mlc_team *team, int64_t key, int ntensors, const int64_t *counts,
                               const uint64_t *shapes, const uint64_t *labels, int dtype, int op, int part, int nparts, int call_dtypes, int index,
                               int64_t step, const void *source, void *data, mlc_callback done,
                               void *user_data, char *err, size_t errlen) {
    if (bad_arguments(team, ntensors, counts, dtype, op, part, nparts, call_dtypes, index, data, err,
                      errlen))
        return MLC_ERR_ARG;
    const void *input = source ? source : data;
    /* Scanned before taking the lock: the threads need it meanwhile. */
    const int nonfinite = team->agree.finite && mlc_dtype_is_float(dtype) && counts[index] > 0 &&
                          mlc_has_nonfinite(input, counts[index], dtype);

    pthread_mutex_lock(&team->lock);
    if (team->shutting_down) {
        pthread_mutex_unlock(&team->lock);
        snprintf(err, errlen, "the team is shut down (ml_comm.finalize() was called)");
        return MLC_ERR_STATE;
    }
    mlc_request **link = &team->groups.open, *req = NULL;
    for (; *link; link = &(*link)->group->next_open) {
        const mlc_group *g = (*link)->group;
        if (g->key != key || g->step != step || g->arrived[index]) continue;
        req = *link;
        break;
    }
    if (req && !same_layout(req, ntensors, counts, shapes, labels, dtype, op)) {
        pthread_mutex_unlock(&team->lock);
        snprintf(err, errlen, "group %lld: tensor %d arrived with another layout (count, shape, label, dtype or op) "
                 "than the group's", (long long)key, index);
        return MLC_ERR_ARG;
    }
    if (!req && cancelled_here(team, key, step)) {
        pthread_mutex_unlock(&team->lock);
        snprintf(err, errlen, "group %lld: tensor %d arrived after its step was cancelled on this rank "
                 "(the step failed)", (long long)key, index);
        return MLC_ERR_STATE;
    }
    if (!req && !(req = open_and_queue(team, link, key, ntensors, counts, shapes, labels, dtype, op, part, nparts,
                                       call_dtypes, step, 0))) {
        pthread_mutex_unlock(&team->lock);
        snprintf(err, errlen, "out of memory opening a group of %d tensors", ntensors);
        return MLC_ERR_NOMEM;
    }
    mlc_group *g = req->group;
    req->tensors[index].data = data;
    req->tensors[index].source = source;
    g->tensor_done[index] = done;
    g->tensor_user[index] = user_data;
    if (nonfinite) {
        g->nonfinite_count++;
        if (g->nonfinite_tensor < 0 || index < g->nonfinite_tensor) g->nonfinite_tensor = index;
    }
    double now = mlc_now();
    req->end.ready_at = now;
    mlc_timeline_record(team, MLC_EVENT_ARRIVE, -1, (int64_t)req->seq, index,
                        counts[index] * mlc_dtype_size(dtype), now, now);
    const int wake = mark_arrived(team, req, index);
    int empty = counts[index] == 0;
    pthread_mutex_unlock(&team->lock);
    /* After the unlock: a woken lane does not stop at the lock this thread still holds. */
    if (wake) pthread_cond_broadcast(&team->groups.ready_cv);
    /* req may be gone from here on (the last arrival lets it finish). */
    if (empty && done) done(user_data, MLC_OK);
    return MLC_OK;
}

static int is_ready(mlc_request *req, int64_t end) {
    return !req->group || atomic_load(&req->group->ready_elems) >= end;
}

/* For the stall watchdog, under the team lock: this rank's tensors not submitted yet. */
static void describe_unsubmitted(const void *arg, char *buf, size_t len) {
    const mlc_request *req = arg;
    const mlc_group *g = req->group;
    int off = snprintf(buf, len, "this rank's own tensors, not submitted yet:"), shown = 0;
    for (int i = 0; i < req->ntensors && off > 0 && (size_t)off + 24 < len; i++)
        if (!g->arrived[i]) off += snprintf(buf + off, len - off, "%s %d", shown++ ? "," : "", i);
    if (shown < req->ntensors - g->narrived && off > 0 && (size_t)off + 5 < len)
        snprintf(buf + off, len - off, ", ...");
}

static void describe_request(const void *arg, char *buf, size_t len) {
    mlc_sign_input in;
    const mlc_request *req = arg;
    mlc_sign_input_of(req->team, req, &in);
    mlc_describe_input(&in, buf, len);
}

/* Under the team lock: wait until done(req) or shutdown. */
static int wait_until(mlc_request *req, int (*done)(mlc_request *, int64_t), int64_t arg) {
    mlc_team *team = req->team;
    mlc_stall stall;
    mlc_stall_begin(&stall, &team->agree.dog, (int64_t)req->seq, describe_request, req,
                    describe_unsubmitted, req);
    while (!done(req, arg) && !team->shutting_down) mlc_stall_cond_wait(&stall, &team->groups.ready_cv, &team->lock);
    return done(req, arg) ? MLC_OK : MLC_ERR_STATE; /* shut down before the tensors came */
}

/* Under the team lock: is_ready, else the end this lane waits for is noted, so that
 * the arrival that makes it ready wakes it (mark_arrived). */
static int ready_else_wanted(mlc_request *req, int64_t end) {
    if (is_ready(req, end)) return 1;
    if (end < req->group->wake_at) req->group->wake_at = end;
    return 0;
}

int mlc_group_wait_ready(mlc_request *req, int64_t end) {
    if (is_ready(req, end)) return MLC_OK;
    double until = mlc_now() + MLC_READY_SPIN_SECONDS;
    while (!is_ready(req, end) && mlc_now() < until) sched_yield();
    pthread_mutex_lock(&req->team->lock);
    int rc = wait_until(req, ready_else_wanted, end);
    pthread_mutex_unlock(&req->team->lock);
    return rc;
}

static int all_arrived(mlc_request *req, int64_t unused) {
    return !req->group || req->group->narrived == req->ntensors;
}

int mlc_group_wait_all(mlc_request *req) {
    if (!req->group) return MLC_OK;
    pthread_mutex_lock(&req->team->lock);
    int rc = wait_until(req, all_arrived, 0);
    pthread_mutex_unlock(&req->team->lock);
    return rc;
}

/* Elements [start, start+count) are reduced and in place: tensors whose last
 * segment this was are done (told now, or after the seal). */
void mlc_group_segment_done(mlc_request *req, int64_t start, int64_t count) {
    mlc_group *g = req->group;
    if (!g || count == 0) return;
    for (int t = mlc_tensor_at(req->starts, req->ntensors, start); t < req->ntensors && req->starts[t] < start + count; t++) {
        if (req->tensors[t].count == 0 || atomic_fetch_sub(&g->segs_left[t], 1) != 1) continue;
        if (g->tensor_ready) g->tensor_ready(g->ready_user, t);
        if (!g->hold && g->tensor_done[t]) g->tensor_done[t](g->tensor_user[t], MLC_OK);
    }
}

void mlc_group_finish(mlc_request *req) {
    mlc_group *g = req->group;
    for (int t = 0; g && t < req->ntensors; t++) {
        if (req->tensors[t].count == 0) continue; /* told at its arrival */
        const int left = atomic_exchange(&g->segs_left[t], 0);
        if ((left > 0 || g->hold) && g->tensor_done[t])
            g->tensor_done[t](g->tensor_user[t], req->end.status ? req->end.status
                                                 : left > 0  ? MLC_ERR_STATE
                                                             : MLC_OK);
    }
}

int64_t mlc_group_key(const mlc_request *req) { return req->group ? req->group->key : 0; }
