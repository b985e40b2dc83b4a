/* How a request is cut up and carried out.
 *
 * A request's tensors are one virtual buffer of `total` elements, cut into
 * segments of chunk_bytes. Segment g belongs to thread owner(g): every rank
 * derives the same assignment, so thread i of every rank works on the same
 * segments in the same order over its own communicator, with no negotiation.
 * A single tensor is reduced in place. Several tensors are packed segment by
 * segment into the team's fusion buffer (slot g mod window), reduced there and
 * unpacked: the owning thread does that copy, so packing is spread over the
 * threads and overlaps the other threads' communication.
 */
#include <string.h>

#include "team.h"

static const void *input_of(const mlc_tensor *t) { return t->source ? t->source : t->data; }

/* Copy elements [start, start+count) of the request's concatenated tensors
 * to (to_fused) or from a contiguous buffer. */
void mlc_copy_range(const mlc_request *req, int64_t start, int64_t count, char *fused, int to_fused) {
    const int es = mlc_dtype_size(req->dtype);
    int lo = 0, hi = req->ntensors - 1;
    while (lo < hi) { /* last tensor whose start <= start */
        int mid = (lo + hi + 1) / 2;
        if (req->starts[mid] <= start) lo = mid; else hi = mid - 1;
    }
    for (int t = lo; t < req->ntensors && count > 0; t++) {
        int64_t within = start - req->starts[t];
        int64_t n = req->tensors[t].count - within;
        if (n <= 0) continue;
        if (n > count) n = count;
        const mlc_tensor *tensor = &req->tensors[t];
        if (to_fused) memcpy(fused, (const char *)input_of(tensor) + within * es, n * es);
        else memcpy((char *)tensor->data + within * es, fused, n * es);
        fused += n * es;
        start += n;
        count -= n;
    }
}

static mlc_xfer worker_xfer(mlc_worker *w, const mlc_request *req, struct mlc_watch *watch) {
    mlc_xfer x = {w->comm, w->team->ctx->rank, w->team->ctx->size, req->dtype,
                  mlc_dtype_size(req->dtype), w->scratch, w->scratch_bytes, w->message, watch};
    mlc_watch_init(watch, w->team, req);
    return x;
}

static int reduce_batch(const mlc_xfer *x, const mlc_request *req, mlc_segment *batch, int nb) {
    if (req->algorithm == MLC_ALG_RING) return mlc_allreduce_ring(x, batch, nb, req->op);
    for (int i = 0; i < nb; i++) {
        int rc = mlc_allreduce_recursive_doubling(x, batch[i].data, batch[i].count, req->op, batch[i].tag);
        if (rc) return rc;
    }
    return MLC_OK;
}


/* Who carries out segments: thread `index` of `nthreads`, staging fused segments
 * in `window` slots of slot_bytes. A worker thread is one lane of its team; a
 * blocking caller running a request inline is the only lane of its own. */
typedef struct mlc_lane {
    int index, nthreads;
    int thread; /* for the timeline: the team thread, or -1 for the caller */
    char *staging;
    int64_t window, slot_bytes;
} mlc_lane;

/* Reduce a batch, unpack it if it was staged, and tell the group which tensors are done. */
static int finish_batch(const mlc_xfer *x, const mlc_request *req, const mlc_lane *lane,
                        mlc_segment *batch, const int64_t *starts, int nb) {
    double t0 = req->team->events ? mlc_now() : 0;
    int rc = reduce_batch(x, req, batch, nb);
    if (rc) return rc;
    int64_t bytes = 0;
    for (int i = 0; i < nb; i++) {
        if (req->ntensors > 1) mlc_copy_range(req, starts[i], batch[i].count, batch[i].data, 0);
        bytes += batch[i].count * x->elem_size;
    }
    /* Recorded before the done callbacks: they run framework code (TensorFlow
     * schedules the ops waiting for these tensors), which is not communication. */
    if (req->team->events)
        mlc_timeline_record(req->team, MLC_EVENT_SEGMENTS, lane->thread,
                            (int64_t)req->seq, starts[0], bytes, t0, mlc_now());
    for (int i = 0; i < nb; i++) mlc_group_segment_done((mlc_request *)req, starts[i], batch[i].count);
    return MLC_OK;
}

static int allreduce_segments(const mlc_xfer *x, const mlc_request *req, const mlc_lane *lane) {
    const int64_t seg = mlc_segment_elems(req->total, lane->slot_bytes / x->elem_size, lane->nthreads,
                                          MLC_RING_BATCH, MLC_MIN_SEGMENT_BYTES / x->elem_size);
    const int64_t nseg = mlc_segment_count(req->total, seg);
    const int fused = req->ntensors > 1;
    const int64_t window = fused ? lane->window : nseg;
    const mlc_tensor *only = &req->tensors[0];
    mlc_segment batch[MLC_RING_BATCH];
    int64_t starts[MLC_RING_BATCH];
    int nb = 0, rc;

    for (int64_t g = 0; g < nseg; g++) {
        if (mlc_segment_owner(g, window, lane->nthreads) != lane->index) continue;
        int64_t start = g * seg, count = req->total - start < seg ? req->total - start : seg;
        /* Batches must be the same on every rank (their messages go in lock step), so
         * a segment whose tensors are still being computed is waited for, never
         * skipped: the batch boundaries depend on the segment numbers alone. */
        if ((rc = mlc_group_wait_ready((mlc_request *)req, start + count))) return rc;
        char *data = fused ? lane->staging + (g % window) * lane->slot_bytes
                           : (char *)only->data + start * x->elem_size;
        if (fused) mlc_copy_range(req, start, count, data, 1);
        else if (only->source && only->source != only->data)
            memcpy(data, (const char *)only->source + start * x->elem_size, count * x->elem_size);
        batch[nb].data = data;
        batch[nb].count = count;
        batch[nb].tag = (int)(g % MLC_TAG_SPACE);
        starts[nb++] = start;
        if (nb < MLC_RING_BATCH && g + (int64_t)lane->nthreads < nseg) continue;
        if ((rc = finish_batch(x, req, lane, batch, starts, nb))) return rc;
        nb = 0;
    }
    /* The loop flushes when no later segment can be this lane's; this is a guard. */
    return nb ? finish_batch(x, req, lane, batch, starts, nb) : MLC_OK;
}

static int allreduce_part(mlc_worker *w, mlc_request *req) {
    mlc_team *team = w->team;
    struct mlc_watch watch;
    const mlc_xfer x = worker_xfer(w, req, &watch);
    const mlc_lane lane = {w->index, team->nthreads, w->index, team->fusion, team->window_segments,
                           team->chunk_bytes};
    return allreduce_segments(&x, req, &lane);
}

static int broadcast_part(mlc_worker *w, mlc_request *req) {
    mlc_team *team = w->team;
    struct mlc_watch watch;
    const mlc_xfer x = worker_xfer(w, req, &watch);
    int64_t g = 0;
    /* Broadcast needs no fusion: each tensor is cut into its own segments. */
    for (int t = 0; t < req->ntensors; t++) {
        int64_t bytes = req->tensors[t].count * x.elem_size;
        for (int64_t off = 0; off < bytes; off += team->chunk_bytes, g++) {
            if (g % team->nthreads != w->index) continue;
            int64_t len = bytes - off < team->chunk_bytes ? bytes - off : team->chunk_bytes;
            int rc = mlc_broadcast_binomial(&x, (char *)req->tensors[t].data + off, len, req->root,
                                            (int)(g % MLC_TAG_SPACE));
            if (rc) return rc;
        }
    }
    return MLC_OK;
}

int mlc_execute_part(mlc_worker *w, mlc_request *req) {
    w->message[0] = '\0';
    int rc = mlc_guard_verdict(w->team, req, w->message); /* ranks agree before data moves */
    if (rc != MLC_OK) {
        /* A failed group is freed once done: its tensors must all have arrived first. */
        if (req->is_group) mlc_group_wait_all(req);
        return rc;
    }
    if (req->done_by_check) return MLC_OK;
    if (req->kind == MLC_KIND_BROADCAST) return broadcast_part(w, req);
    return allreduce_part(w, req);
}

/* A blocking request on the caller's thread: no hand-off to the team's threads
 * and back, which costs more than the whole transfer up to a few MiB. Below the
 * latency threshold the whole buffer takes recursive doubling; above, the caller
 * runs the ring over the segments as a one-thread lane. */
int mlc_execute_inline(mlc_team *team, mlc_request *req) {
    const int es = mlc_dtype_size(req->dtype);
    struct mlc_watch watch;
    mlc_watch_init(&watch, team, req);
    mlc_xfer x = {team->caller_comm, team->ctx->rank, team->ctx->size, req->dtype, es,
                  team->caller_scratch, team->caller_scratch_bytes, team->caller_message, &watch};
    team->caller_message[0] = '\0';
    int rc = mlc_guard_verdict(team, req, team->caller_message); /* ranks agree before data moves */
    if (rc != MLC_OK || req->done_by_check || (req->kind == MLC_KIND_ALLREDUCE && req->total == 0))
        return rc;
    if (req->kind == MLC_KIND_BROADCAST) {
        for (int t = 0; t < req->ntensors && rc == MLC_OK; t++)
            rc = mlc_broadcast_binomial(&x, req->tensors[t].data, req->tensors[t].count * es, req->root,
                                        t % MLC_TAG_SPACE);
        return rc;
    }
    if (req->algorithm == MLC_ALG_RING) {
        const mlc_lane lane = {0, 1, -1, team->caller_pack, MLC_RING_BATCH, team->chunk_bytes};
        return allreduce_segments(&x, req, &lane);
    }
    const int in_place = req->ntensors == 1 && input_of(&req->tensors[0]) == req->tensors[0].data;
    char *buf = in_place ? req->tensors[0].data : team->caller_pack;
    if (!in_place) mlc_copy_range(req, 0, req->total, buf, 1);
    rc = mlc_allreduce_recursive_doubling(&x, buf, req->total, req->op, 0);
    if (rc == MLC_OK && !in_place) mlc_copy_range(req, 0, req->total, buf, 0);
    return rc;
}
