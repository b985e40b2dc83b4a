/* Device buffers staged through pinned host memory, piece by piece.
 *
 * A call's device bytes are cut into pieces of piece_bytes (the caller's layer cuts them,
 * team/staged.c). Piece k comes down into slot k % 3 on a down stream, is reduced there by
 * the host path, and goes up from that slot on an up stream, so that piece k+1's download
 * and piece k-1's upload run on the copy engines while the ranks reduce piece k. Bytes on
 * the PCIe link per piece: its bytes down and its bytes up (a broadcast's root: down only;
 * its other ranks: up only). Pinned memory: 3 x piece_bytes per team, held from the first
 * device call until the team ends.
 *
 * Streams: the first half (rounded up) carry downloads, the rest uploads, each piece on the
 * next of its kind, so downloads and uploads meet on separate streams; one stream carries
 * both. Each piece's copy is cut into at most copies_per_stream copies.
 */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "stage.h"

#define TRY(call)                                                                                 \
    do {                                                                                          \
        CUresult rc_ = (call);                                                                    \
        if (rc_ != MLC_CU_SUCCESS) return rc_;                                                    \
    } while (0)

int mlc_stage_open(mlc_stager *st, const char *library, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    st->ordinal = -1;
    return mlc_cuda_open(&st->cu, library, err, errlen);
}

/* Everything that belongs to the device of the last call (its context current). */
static void release_device(mlc_stager *st) {
    if (st->ordinal < 0) return;
    for (int s = 0; s < st->nstreams; s++)
        if (st->streams[s]) st->cu.stream_destroy(st->streams[s]);
    CUevent *events[] = {st->down_start, st->down_done, st->up_start, st->up_done};
    for (size_t e = 0; e < sizeof events / sizeof events[0]; e++)
        for (int i = 0; i < MLC_STAGE_SLOTS; i++)
            if (events[e][i]) st->cu.event_destroy(events[e][i]);
    if (st->ordered) st->cu.event_destroy(st->ordered);
    for (int i = 0; i < MLC_STAGE_SLOTS; i++)
        if (st->slots[i]) st->cu.mem_free_host(st->slots[i]);
    st->cu.primary_ctx_release(st->device);
    memset(st->streams, 0, sizeof st->streams);
    memset(st->down_start, 0, sizeof st->down_start);
    memset(st->down_done, 0, sizeof st->down_done);
    memset(st->up_start, 0, sizeof st->up_start);
    memset(st->up_done, 0, sizeof st->up_done);
    memset(st->slots, 0, sizeof st->slots);
    st->ordered = NULL;
    st->ordinal = -1;
}

void mlc_stage_close(mlc_stager *st) {
    if (!st->cu.library) return;
    if (st->ordinal >= 0) {
        CUcontext current = NULL;
        st->cu.ctx_get_current(&current);
        st->cu.ctx_set_current(st->ctx);
        release_device(st);
        st->cu.ctx_set_current(current == st->ctx ? NULL : current);
    }
    mlc_cuda_close(&st->cu);
}

int mlc_stage_device_of(mlc_stager *st, const void *ptr, int *ordinal, int *host) {
    int type = 0;
    *host = 0;
    if (st->cu.pointer_get_attribute(&type, MLC_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)ptr) !=
        MLC_CU_SUCCESS)
        return MLC_ERR_ARG; /* memory CUDA never saw: plain host memory */
    if (type != MLC_CU_MEMORYTYPE_DEVICE && type != MLC_CU_MEMORYTYPE_UNIFIED) {
        *host = 1;
        return MLC_ERR_ARG;
    }
    return st->cu.pointer_get_attribute(ordinal, MLC_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                        (CUdeviceptr)(uintptr_t)ptr) == MLC_CU_SUCCESS
               ? MLC_OK
               : MLC_ERR_ARG;
}

static CUresult acquire_device(mlc_stager *st, int ordinal, int nstreams, int copies, int64_t piece_bytes) {
    TRY(st->cu.device_get(&st->device, ordinal));
    TRY(st->cu.primary_ctx_retain(&st->ctx, st->device));
    st->ordinal = ordinal; /* from here on release_device frees what was made */
    st->nstreams = nstreams;
    st->copies_per_stream = copies;
    st->piece_bytes = piece_bytes;
    TRY(st->cu.ctx_set_current(st->ctx));
    for (int s = 0; s < nstreams; s++) TRY(st->cu.stream_create(&st->streams[s], MLC_CU_STREAM_NON_BLOCKING));
    TRY(st->cu.event_create(&st->ordered, MLC_CU_EVENT_DISABLE_TIMING));
    for (int i = 0; i < MLC_STAGE_SLOTS; i++) {
        TRY(st->cu.event_create(&st->down_start[i], 0));
        TRY(st->cu.event_create(&st->down_done[i], 0));
        TRY(st->cu.event_create(&st->up_start[i], 0));
        TRY(st->cu.event_create(&st->up_done[i], 0));
        TRY(st->cu.mem_host_alloc((void **)&st->slots[i], (size_t)piece_bytes, 0));
        st->down_bytes[i] = st->up_bytes[i] = 0;
    }
    return MLC_CU_SUCCESS;
}

int mlc_stage_begin(mlc_stager *st, int ordinal, int nstreams, int copies_per_stream, int64_t piece_bytes,
                    uintptr_t caller_stream, char *err, size_t errlen) {
    char name[64];
    CUresult rc = st->cu.ctx_get_current(&st->callers);
    if (rc == MLC_CU_SUCCESS && (st->ordinal != ordinal || st->nstreams != nstreams ||
                                 st->copies_per_stream != copies_per_stream || st->piece_bytes != piece_bytes)) {
        if (st->ordinal >= 0 && st->cu.ctx_set_current(st->ctx) == MLC_CU_SUCCESS) release_device(st);
        rc = acquire_device(st, ordinal, nstreams, copies_per_stream, piece_bytes);
        if (rc != MLC_CU_SUCCESS) {
            st->cu.ctx_set_current(st->ctx);
            release_device(st);
        }
    }
    if (rc == MLC_CU_SUCCESS) rc = st->cu.ctx_set_current(st->ctx);
    if (rc == MLC_CU_SUCCESS) rc = st->cu.event_record(st->ordered, (CUstream)caller_stream);
    for (int s = 0; rc == MLC_CU_SUCCESS && s < st->nstreams; s++)
        rc = st->cu.stream_wait_event(st->streams[s], st->ordered, 0);
    if (rc != MLC_CU_SUCCESS) {
        snprintf(err, errlen, "setting up staging on CUDA device %d failed (%s)", ordinal,
                 mlc_cuda_error_name(&st->cu, rc, name, sizeof name));
        if (st->callers) st->cu.ctx_set_current(st->callers);
        return rc;
    }
    return MLC_OK;
}

char *mlc_stage_slot(const mlc_stager *st, int64_t piece) { return st->slots[piece % MLC_STAGE_SLOTS]; }

static CUstream stream_for(const mlc_stager *st, int64_t piece, int up) {
    const int downs = (st->nstreams + 1) / 2, ups = st->nstreams - downs;
    if (!up || ups == 0) return st->streams[piece % downs];
    return st->streams[downs + piece % ups];
}

/* The spans' bytes cut into copies of at most piece_bytes / copies_per_stream. */
static CUresult copy_spans(mlc_stager *st, int64_t piece, const mlc_stage_span *spans, int nspans, int up,
                           CUstream stream) {
    char *slot = mlc_stage_slot(st, piece);
    int64_t step = st->piece_bytes / st->copies_per_stream;
    if (step < 1) step = 1;
    for (int i = 0; i < nspans; i++)
        for (int64_t off = 0; off < spans[i].bytes; off += step) {
            const size_t n = (size_t)(spans[i].bytes - off < step ? spans[i].bytes - off : step);
            char *host = slot + spans[i].host_offset + off;
            TRY(up ? st->cu.memcpy_htod_async(spans[i].device + (CUdeviceptr)off, host, n, stream)
                   : st->cu.memcpy_dtoh_async(host, spans[i].device + (CUdeviceptr)off, n, stream));
        }
    return MLC_CU_SUCCESS;
}

static int64_t span_bytes(const mlc_stage_span *spans, int nspans) {
    int64_t bytes = 0;
    for (int i = 0; i < nspans; i++) bytes += spans[i].bytes;
    return bytes;
}

static double elapsed(mlc_stager *st, CUevent start, CUevent end) {
    float ms = 0;
    return st->cu.event_elapsed_time(&ms, start, end) == MLC_CU_SUCCESS ? ms * 1e-3 : 0;
}

/* A slot's copies one way are done: count their bytes and the time they took. */
static CUresult finish(mlc_stager *st, int64_t *pending, CUevent start, CUevent done, int64_t *bytes,
                       double *seconds) {
    if (!*pending) return MLC_CU_SUCCESS;
    TRY(st->cu.event_synchronize(done));
    *bytes += *pending;
    *seconds += elapsed(st, start, done);
    *pending = 0;
    return MLC_CU_SUCCESS;
}

/* The slot's upload is done (it has had a whole piece's reduction to finish). */
static CUresult finish_up(mlc_stager *st, int slot) {
    return finish(st, &st->up_bytes[slot], st->up_start[slot], st->up_done[slot], &st->counters.bytes_up,
                  &st->counters.seconds_up);
}

/* A piece's copies one way, between the slot's two events, on its stream for that way. */
static CUresult start(mlc_stager *st, int64_t piece, const mlc_stage_span *spans, int nspans, int up) {
    const int slot = (int)(piece % MLC_STAGE_SLOTS);
    CUstream stream = stream_for(st, piece, up);
    TRY(st->cu.event_record(up ? st->up_start[slot] : st->down_start[slot], stream));
    TRY(copy_spans(st, piece, spans, nspans, up, stream));
    TRY(st->cu.event_record(up ? st->up_done[slot] : st->down_done[slot], stream));
    (up ? st->up_bytes : st->down_bytes)[slot] = span_bytes(spans, nspans);
    return MLC_CU_SUCCESS;
}

int mlc_stage_wait_up(mlc_stager *st, int64_t piece) { return finish_up(st, (int)(piece % MLC_STAGE_SLOTS)); }

int mlc_stage_down(mlc_stager *st, int64_t piece, const mlc_stage_span *spans, int nspans) {
    TRY(finish_up(st, (int)(piece % MLC_STAGE_SLOTS)));
    return start(st, piece, spans, nspans, 0);
}

int mlc_stage_wait_down(mlc_stager *st, int64_t piece) {
    const int slot = (int)(piece % MLC_STAGE_SLOTS);
    return finish(st, &st->down_bytes[slot], st->down_start[slot], st->down_done[slot], &st->counters.bytes_down,
                  &st->counters.seconds_down);
}

int mlc_stage_up(mlc_stager *st, int64_t piece, const mlc_stage_span *spans, int nspans) {
    return start(st, piece, spans, nspans, 1);
}

int mlc_stage_end(mlc_stager *st) {
    CUresult first = MLC_CU_SUCCESS;
    for (int s = 0; s < st->nstreams; s++) {
        CUresult rc = st->cu.stream_synchronize(st->streams[s]);
        if (first == MLC_CU_SUCCESS) first = rc;
    }
    for (int slot = 0; slot < MLC_STAGE_SLOTS && first == MLC_CU_SUCCESS; slot++) {
        first = finish_up(st, slot);
        if (first == MLC_CU_SUCCESS) first = mlc_stage_wait_down(st, slot);
    }
    for (int slot = 0; slot < MLC_STAGE_SLOTS; slot++) st->down_bytes[slot] = st->up_bytes[slot] = 0;
    st->cu.ctx_set_current(st->callers);
    return first;
}
