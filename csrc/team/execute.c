/* How a request's plan is carried out, by one lane: a team thread doing its
 * share, or a blocking caller doing all of it.
 *
 * A request's tensors are one virtual buffer of `span` elements (its `total`,
 * and with plan.aligned the gaps before large tensors), cut into the plan's
 * segments. Segment g belongs to lane owner(g): every rank derives the same
 * assignment, so thread i of every rank works on the same segments in the same
 * order over its own communicator, with no negotiation. A segment that lies
 * inside one tensor is reduced where that tensor lies: out of place, straight
 * from the caller's input into its output, with no copy (with plan.aligned a
 * large tensor starts on a segment boundary, base/schedule.c, so only its last
 * segment may be shared, with the small tensors after it). A segment that spans
 * tensors is packed into a fusion slot (slot g mod window), reduced there and
 * unpacked by the owning lane, so packing is spread over the threads and
 * overlaps the other threads' communication. The choice depends on the counts
 * alone, so every rank makes the same one.
 */
#include <stdio.h>
#include <string.h>

#include "team.h"

/* Who carries out segments: lane `index` of `lanes`, staging fused segments in
 * slots of slot_bytes. */
typedef struct mlc_lane {
    int index;
    int thread; /* for the timeline: the team thread, or -1 for the caller */
    mlc_tp *tp;
    char *staging;
    int64_t slot_bytes;
    char *scratch;
    int64_t scratch_bytes;
} mlc_lane;

static void describe_request(const void *arg, char *buf, size_t len) {
    mlc_sign_input in;
    const mlc_request *req = arg;
    mlc_sign_input_of(req->team, req, &in);
    mlc_describe_input(&in, buf, len);
}

/* The position of the first NaN/Inf among count float32 values; -1: none. */
static int64_t first_special(const float *values, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        uint32_t bits;
        memcpy(&bits, &values[i], sizeof bits);
        if ((bits & 0x7f800000u) == 0x7f800000u) return i;
    }
    return -1;
}

/* A batch failed with MLC_ERR_OVERFLOW (the ring left the same bits on every rank):
 * note its first Inf/NaN in the request, if it comes before what other lanes noted. */
static void note_overflow(const mlc_request *req, const mlc_segment *batch, const int64_t *starts, int nb) {
    for (int i = 0; i < nb; i++) {
        int64_t at = first_special((const float *)batch[i].data, batch[i].count);
        if (at < 0) continue;
        int64_t pos = starts[i] + at;
        int t = mlc_tensor_at(req->starts, req->ntensors, pos);
        mlc_request *r = (mlc_request *)req;
        pthread_mutex_lock(&req->team->lock);
        if (r->fault.overflow_tensor < 0 || pos < req->starts[r->fault.overflow_tensor] + r->fault.overflow_element) {
            r->fault.overflow_tensor = t;
            r->fault.overflow_element = pos - req->starts[t];
        }
        pthread_mutex_unlock(&req->team->lock);
        return;
    }
}

void mlc_overflow_message(const mlc_request *req, char *buf, size_t len) {
    mlc_sign_input in;
    char desc[MLC_MSG_LEN / 2];
    mlc_sign_input_of(req->team, req, &in);
    mlc_describe_input(&in, desc, sizeof desc);
    snprintf(buf, len,
             "float16 overflow on the wire in team %d request %lld (%s): the sum of tensor %d "
             "(element %lld) is beyond +-65504, float16's range, or an input held NaN/Inf; nothing "
             "was returned. Use compression \"bf16\" (float32's range) or none, or scale the "
             "values down",
             req->team->agree.dog.team_id, (long long)req->seq, desc, req->fault.overflow_tensor,
             (long long)req->fault.overflow_element);
}

/* Reduce a batch, unpack what was staged, and tell the group which tensors are done. */
static int finish_batch(const mlc_request *req, const mlc_lane *lane, mlc_segment *batch,
                        const int64_t *starts, const int *staged, int nb) {
    const int es = mlc_dtype_size(req->dtype);
    const mlc_algo *algo = mlc_algo_find(req->plan.algorithm);
    const mlc_algo_call call = {req->dtype, es, req->op, batch, nb, lane->scratch, lane->scratch_bytes,
                                req->plan.compression};
    double t0 = req->team->timeline.events ? mlc_now() : 0;
    int rc = algo ? algo->allreduce(lane->tp, &call) : MLC_ERR_ARG;
    if (rc == MLC_ERR_OVERFLOW) note_overflow(req, batch, starts, nb);
    if (rc) return rc;
    int64_t bytes = 0;
    for (int i = 0; i < nb; i++) {
        if (staged[i])
            mlc_scatter_range(req->tensors, req->starts, req->ntensors, req->dtype, starts[i],
                              batch[i].count, batch[i].data);
        bytes += batch[i].count * es;
    }
    /* Recorded before the done callbacks: they run framework code (TensorFlow
     * schedules the ops waiting for these tensors), which is not communication. */
    if (req->team->timeline.events)
        mlc_timeline_record(req->team, MLC_EVENT_SEGMENTS, lane->thread, (int64_t)req->seq,
                            starts[0], bytes, t0, mlc_now());
    for (int i = 0; i < nb; i++) mlc_group_segment_done((mlc_request *)req, starts[i], batch[i].count);
    return MLC_OK;
}

static int allreduce_segments(const mlc_request *req, const mlc_lane *lane) {
    const mlc_plan *p = &req->plan;
    const int es = mlc_dtype_size(req->dtype);
    mlc_segment batch[MLC_RING_BATCH];
    int64_t starts[MLC_RING_BATCH];
    int staged[MLC_RING_BATCH];
    int nb = 0, rc;

    for (int64_t g = 0; g < p->nseg; g++) {
        if (mlc_segment_owner(g, p->window, p->lanes) != lane->index) continue;
        int64_t start = g * p->seg_elems;
        int64_t count = req->span - start < p->seg_elems ? req->span - start : p->seg_elems;
        /* In an aligned layout a segment may end in the gap before a large tensor. */
        const int t_last = mlc_tensor_at(req->starts, req->ntensors, start + count - 1);
        const int64_t content_end = req->starts[t_last] + req->tensors[t_last].count;
        if (content_end < start + count) count = content_end - start;
        /* Batches must be the same on every rank (their messages go in lock step), so
         * a segment whose tensors are still being computed is waited for, never
         * skipped: the batch boundaries depend on the segment numbers alone. */
        if ((rc = mlc_group_wait_ready((mlc_request *)req, start + count))) return rc;
        const int t = mlc_tensor_at(req->starts, req->ntensors, start);
        const mlc_tensor *tensor = &req->tensors[t];
        staged[nb] = start + count > req->starts[t] + tensor->count;
        if (staged[nb]) {
            batch[nb].data = lane->staging + (g % p->window) * lane->slot_bytes;
            batch[nb].input = NULL;
            mlc_gather_range(req->tensors, req->starts, req->ntensors, req->dtype, start, count,
                             batch[nb].data);
        } else {
            const int64_t offset = (start - req->starts[t]) * es;
            batch[nb].data = (char *)tensor->data + offset;
            batch[nb].input = mlc_tensor_input(tensor) != tensor->data
                                  ? (const char *)mlc_tensor_input(tensor) + offset : NULL;
        }
        batch[nb].count = count;
        batch[nb].tag = (int)(g % MLC_TAG_SPACE);
        starts[nb++] = start;
        if (nb < MLC_RING_BATCH && g + (int64_t)p->lanes < p->nseg) continue;
        if ((rc = finish_batch(req, lane, batch, starts, staged, nb))) return rc;
        nb = 0;
    }
    /* The loop flushes when no later segment can be this lane's; this is a guard. */
    return nb ? finish_batch(req, lane, batch, starts, staged, nb) : MLC_OK;
}

/* Broadcast needs no fusion: each tensor is cut into its own segments of the
 * plan's length (whole tensors on the caller's thread). */
static int broadcast_segments(const mlc_request *req, const mlc_lane *lane) {
    const int64_t es = mlc_dtype_size(req->dtype), seg_bytes = req->plan.seg_elems * es;
    int64_t g = 0;
    for (int t = 0; t < req->ntensors; t++) {
        int64_t bytes = req->tensors[t].count * es;
        int64_t step = seg_bytes > 0 ? seg_bytes : bytes + 1;
        for (int64_t off = 0; off < bytes; off += step, g++) {
            if (g % req->plan.lanes != lane->index) continue;
            int64_t len = bytes - off < step ? bytes - off : step;
            int rc = mlc_broadcast_binomial(lane->tp, (char *)req->tensors[t].data + off, len,
                                            req->root, (int)(g % MLC_TAG_SPACE));
            if (rc) return rc;
        }
    }
    return MLC_OK;
}

/* A collective of rows: its plan's row of the table, whole buffers. */
static int rows_collective(const mlc_request *req, const mlc_lane *lane) {
    const mlc_algo *algo = mlc_algo_find(req->plan.algorithm);
    return algo && algo->rows ? algo->rows(lane->tp, &req->rows.call) : MLC_ERR_ARG;
}

/* The agreement first (ranks agree before data moves), then the data, then for a
 * keyed group its seal (seal.c) on lane 0. */
static int run_lane(mlc_request *req, const mlc_lane *lane, char *message) {
    mlc_team *team = req->team;
    message[0] = '\0';
    const int verdict = mlc_agree_verdict(&team->agree, &req->agreement, message);
    if (lane->thread < 0) mlc_ahead_verdict(team, req, verdict);
    int rc = verdict;
    if (rc == MLC_OK && !req->agreement.done_by_exchange) {
        mlc_stall stall;
        mlc_stall_begin(&stall, &team->agree.dog, (int64_t)req->seq, describe_request, req, NULL, NULL);
        mlc_tp_set_progress(lane->tp, mlc_stall_transport_progress, &stall);
        if (req->kind == MLC_KIND_BROADCAST) rc = broadcast_segments(req, lane);
        else if (req->kind != MLC_KIND_ALLREDUCE) rc = rows_collective(req, lane);
        else if (!req->plan.direct) rc = allreduce_segments(req, lane);
        else rc = MLC_ERR_STATE; /* planned direct, but the exchange could not carry it */
        if (rc == MLC_ERR_STATE && req->plan.direct)
            snprintf(message, MLC_MSG_LEN, "the direct threshold changed while this request was queued");
        /* On the team's threads the last lane to finish writes it (team.c): lanes race. */
        if (rc == MLC_ERR_OVERFLOW && lane->thread < 0) mlc_overflow_message(req, message, MLC_MSG_LEN);
        mlc_tp_set_progress(lane->tp, NULL, NULL);
    }
    if (lane->thread < 0) mlc_ahead_done(team, req, verdict, rc);
    if (!req->group) return rc;
    pthread_mutex_lock(&team->lock);
    mlc_seal_lane_done(req);
    pthread_mutex_unlock(&team->lock);
    /* A group is finished (and freed) only once all its tensors arrived, even
     * empty ones that no segment waits for, and after a failure. */
    const int arrived = mlc_group_wait_all(req); /* MLC_ERR_STATE: shut down first */
    /* Every rank's verdict is the same, so every rank's lane 0 seals, or none. */
    if (verdict != MLC_OK || arrived != MLC_OK || lane->index != 0 || !mlc_seal_wanted(req))
        return rc ? rc : arrived;
    char sealed[MLC_MSG_LEN];
    mlc_stall stall; /* a peer that never seals is named like one that never sends data */
    mlc_stall_begin(&stall, &team->agree.dog, (int64_t)req->seq, describe_request, req, NULL, NULL);
    mlc_tp_set_progress(lane->tp, mlc_stall_transport_progress, &stall);
    const int seal = mlc_seal(req, lane->tp, lane->scratch, lane->scratch_bytes, sealed);
    mlc_tp_set_progress(lane->tp, NULL, NULL);
    if (rc == MLC_OK && seal != MLC_OK) {
        rc = seal;
        memcpy(message, sealed, MLC_MSG_LEN);
    }
    return rc;
}

int mlc_execute_part(mlc_worker *w, mlc_request *req) {
    mlc_team *team = w->team;
    const mlc_lane lane = {w->index, w->index, &w->tp, team->fusion, team->config.chunk_bytes,
                           w->scratch, w->scratch_bytes};
    return run_lane(req, &lane, w->message);
}

/* A blocking request on the caller's thread: no hand-off to the team's threads
 * and back, which costs more than the whole transfer up to a few MiB. */
int mlc_execute_inline(mlc_team *team, mlc_request *req) {
    const mlc_lane lane = {0, -1, &team->caller.tp, team->caller.pack, team->config.chunk_bytes,
                           team->caller.scratch, team->caller.scratch_bytes};
    return run_lane(req, &lane, team->caller.message);
}
