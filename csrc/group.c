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
 * that still lacks its index.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "team.h"

#define MLC_READY_SPIN_SECONDS 50e-6

static int same_layout(const mlc_request *g, int ntensors, const int64_t *counts, int dtype, int op) {
    if (g->ntensors != ntensors || g->dtype != dtype || g->op != op) return 0;
    for (int i = 0; i < ntensors; i++)
        if (g->tensors[i].count != counts[i]) return 0;
    return 1;
}

static mlc_request *open_group(mlc_team *team, int64_t key, int ntensors, const int64_t *counts,
                               int dtype, int op) {
    mlc_request *req = calloc(1, sizeof *req);
    if (!req) return NULL;
    req->heap = 1;
    req->tensors = calloc(ntensors, sizeof *req->tensors);
    req->starts = calloc(ntensors + 1, sizeof *req->starts);
    req->arrived = calloc(ntensors, 1);
    req->segs_left = calloc(ntensors, sizeof *req->segs_left);
    req->tensor_done = calloc(ntensors, sizeof *req->tensor_done);
    req->tensor_user = calloc(ntensors, sizeof *req->tensor_user);
    if (!req->tensors || !req->starts || !req->arrived || !req->segs_left || !req->tensor_done ||
        !req->tensor_user) {
        mlc_free_request(req);
        return NULL;
    }
    for (int i = 0; i < ntensors; i++) {
        req->tensors[i].count = counts[i];
        req->starts[i] = req->total;
        req->total += counts[i];
    }
    req->starts[ntensors] = req->total;
    req->team = team;
    req->kind = MLC_KIND_ALLREDUCE;
    req->ntensors = ntensors;
    req->dtype = dtype;
    req->op = op;
    req->algorithm = team->algorithm == MLC_ALG_AUTO ? MLC_ALG_RING : team->algorithm;
    req->detached = 1;
    req->is_group = 1;
    req->key = key;
    const int64_t seg = mlc_request_segment_elems(team, req);
    for (int i = 0; i < ntensors; i++) {
        int64_t first = req->starts[i] / seg, last = (req->starts[i + 1] - 1) / seg;
        atomic_init(&req->segs_left[i], counts[i] ? (int)(last - first + 1) : 0);
    }
    atomic_init(&req->ready_elems, 0);
    return req;
}

int mlc_team_group_arrive(mlc_team *team, int64_t key, int ntensors, const int64_t *counts, int dtype,
                          int op, int index, const void *source, void *data, mlc_callback done,
                          void *user_data, char *err, size_t errlen) {
    return mlc_team_group_arrive_part(team, key, ntensors, counts, dtype, op, 0, 1, 0, index, source,
                                      data, done, user_data, err, errlen);
}

int mlc_team_group_arrive_part(mlc_team *team, int64_t key, int ntensors, const int64_t *counts,
                               int dtype, int op, int part, int nparts, int call_dtypes, int index,
                               const void *source, void *data, mlc_callback done, void *user_data,
                               char *err, size_t errlen) {
    if (!team || ntensors < 1 || !counts || index < 0 || index >= ntensors || dtype < 0 ||
        dtype >= MLC_NUM_DTYPES || (op != MLC_OP_SUM && op != MLC_OP_AVERAGE) || nparts < 1 ||
        part < 0 || part >= nparts || call_dtypes < 0 || call_dtypes > 0xffff) {
        snprintf(err, errlen, "mlc_team_group_arrive: invalid arguments (index %d of %d)", index, ntensors);
        return MLC_ERR_ARG;
    }
    for (int i = 0; i < ntensors; i++)
        if (counts[i] < 0) return MLC_ERR_ARG;
    if (counts[index] > 0 && !data) return MLC_ERR_ARG;

    pthread_mutex_lock(&team->lock);
    if (team->shutting_down) {
        pthread_mutex_unlock(&team->lock);
        snprintf(err, errlen, "the team is shut down (ml_comm.finalize() was called)");
        return MLC_ERR_STATE;
    }
    mlc_request **link = &team->open_groups, *g = NULL;
    for (; *link; link = &(*link)->next_open) {
        if ((*link)->key != key || (*link)->arrived[index]) continue;
        g = *link;
        break;
    }
    if (g && !same_layout(g, ntensors, counts, dtype, op)) {
        pthread_mutex_unlock(&team->lock);
        snprintf(err, errlen, "group %lld: tensor %d arrived with another layout (count, dtype or op) "
                 "than the group's", (long long)key, index);
        return MLC_ERR_ARG;
    }
    if (!g) {
        g = open_group(team, key, ntensors, counts, dtype, op);
        if (!g) {
            pthread_mutex_unlock(&team->lock);
            snprintf(err, errlen, "out of memory opening a group of %d tensors", ntensors);
            return MLC_ERR_NOMEM;
        }
        g->part = part;
        g->nparts = nparts;
        g->call_dtypes = call_dtypes;
        *link = g; /* appended: the open list keeps step order */
        mlc_queue_request(team, g);
    }
    g->tensors[index].data = data;
    g->tensors[index].source = source;
    g->tensor_done[index] = done;
    g->tensor_user[index] = user_data;
    g->arrived[index] = 1;
    g->narrived++;
    double now = mlc_now();
    g->ready_at = now;
    mlc_timeline_record(team, MLC_EVENT_ARRIVE, -1, (int64_t)g->seq, index,
                        counts[index] * mlc_dtype_size(dtype), now, now);
    while (g->next_missing < ntensors && g->arrived[g->next_missing]) g->next_missing++;
    atomic_store(&g->ready_elems, g->starts[g->next_missing]);
    if (g->narrived == ntensors) { /* complete: no later arrival may join it */
        for (link = &team->open_groups; *link != g; link = &(*link)->next_open) {}
        *link = g->next_open;
    }
    pthread_cond_broadcast(&team->ready_cv);
    int empty = counts[index] == 0;
    pthread_mutex_unlock(&team->lock);
    /* g may be gone from here on (the last arrival lets it complete). */
    if (empty && done) done(user_data, MLC_OK);
    return MLC_OK;
}

static int mlc_group_is_ready(mlc_request *req, int64_t end) {
    return !req->is_group || atomic_load(&req->ready_elems) >= end;
}

/* For the stall watchdog, under the team lock: this rank's tensors not submitted yet. */
static void describe_unsubmitted(const void *arg, char *buf, size_t len) {
    const mlc_request *req = arg;
    int off = snprintf(buf, len, "this rank's own tensors, not submitted yet:"), shown = 0;
    for (int i = 0; i < req->ntensors && off > 0 && (size_t)off + 24 < len; i++)
        if (!req->arrived[i]) off += snprintf(buf + off, len - off, "%s %d", shown++ ? "," : "", i);
    if (shown < req->ntensors - req->narrived && off > 0 && (size_t)off + 5 < len)
        snprintf(buf + off, len - off, ", ...");
}

int mlc_group_wait_ready(mlc_request *req, int64_t end) {
    if (mlc_group_is_ready(req, end)) return MLC_OK;
    double until = mlc_now() + MLC_READY_SPIN_SECONDS;
    while (!mlc_group_is_ready(req, end) && mlc_now() < until) sched_yield();
    mlc_team *team = req->team;
    int rc = MLC_OK;
    mlc_stall stall = {0};
    pthread_mutex_lock(&team->lock);
    while (!mlc_group_is_ready(req, end) && !team->shutting_down)
        mlc_stall_cond_wait(&stall, &team->ready_cv, &team->lock, team, req, describe_unsubmitted, req);
    if (!mlc_group_is_ready(req, end)) rc = MLC_ERR_STATE; /* shut down before the tensors came */
    pthread_mutex_unlock(&team->lock);
    return rc;
}

int mlc_group_wait_all(mlc_request *req) {
    mlc_team *team = req->team;
    int rc = MLC_OK;
    mlc_stall stall = {0};
    pthread_mutex_lock(&team->lock);
    while (req->narrived < req->ntensors && !team->shutting_down)
        mlc_stall_cond_wait(&stall, &team->ready_cv, &team->lock, team, req, describe_unsubmitted, req);
    if (req->narrived < req->ntensors) rc = MLC_ERR_STATE;
    pthread_mutex_unlock(&team->lock);
    return rc;
}

/* Elements [start, start+count) are reduced and in place: tensors whose last
 * segment this was are done. */
void mlc_group_segment_done(mlc_request *req, int64_t start, int64_t count) {
    if (!req->is_group || count == 0) return;
    int lo = 0, hi = req->ntensors - 1;
    while (lo < hi) { /* last tensor starting at or before start */
        int mid = (lo + hi + 1) / 2;
        if (req->starts[mid] <= start) lo = mid; else hi = mid - 1;
    }
    for (int t = lo; t < req->ntensors && req->starts[t] < start + count; t++) {
        if (req->tensors[t].count == 0) continue;
        if (atomic_fetch_sub(&req->segs_left[t], 1) == 1 && req->tensor_done[t])
            req->tensor_done[t](req->tensor_user[t], MLC_OK);
    }
}

/* After a failure: every tensor still waiting hears of it, once. */
void mlc_group_fail_remaining(mlc_request *req) {
    if (!req->is_group) return;
    for (int t = 0; t < req->ntensors; t++)
        if (atomic_exchange(&req->segs_left[t], 0) > 0 && req->tensor_done[t])
            req->tensor_done[t](req->tensor_user[t], req->status ? req->status : MLC_ERR_STATE);
}
