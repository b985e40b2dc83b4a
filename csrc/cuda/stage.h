/* Staging device buffers through pinned host memory (stage.c): the copies of one call's
 * pieces, down (device to host) and up (host to device), on CUDA streams of their own,
 * so that a piece's copies overlap the reduction of the piece before or after it. */
#ifndef MLC_STAGE_H
#define MLC_STAGE_H

#include "cuda.h"

/* Pinned host slots a call's pieces rotate through: piece k+1 comes down into one while
 * piece k is reduced in the next and piece k-1 goes up from the third. */
#define MLC_STAGE_SLOTS 3
#define MLC_STAGE_MAX_STREAMS 16

/* Where a piece's bytes lie on the device: `bytes` at `device`, `host_offset` into the slot. */
typedef struct mlc_stage_span {
    CUdeviceptr device;
    int64_t host_offset;
    int64_t bytes;
} mlc_stage_span;

/* Time the copies themselves took (CUDA's events around each piece's copies). */
typedef struct mlc_stage_counters {
    int64_t bytes_down, bytes_up;
    double seconds_down, seconds_up;
} mlc_stage_counters;

typedef struct mlc_stager {
    mlc_cuda cu;
    int ordinal; /* the device its streams, events and slots belong to; -1: none yet */
    CUdevice device;
    CUcontext ctx;     /* the device's primary context, retained */
    CUcontext callers; /* the calling thread's current context, set back by mlc_stage_end */
    int nstreams, copies_per_stream;
    int64_t piece_bytes;
    CUstream streams[MLC_STAGE_MAX_STREAMS];
    CUevent ordered; /* recorded on the caller's stream: the call's copies wait for it */
    CUevent down_start[MLC_STAGE_SLOTS], down_done[MLC_STAGE_SLOTS];
    CUevent up_start[MLC_STAGE_SLOTS], up_done[MLC_STAGE_SLOTS];
    int64_t down_bytes[MLC_STAGE_SLOTS], up_bytes[MLC_STAGE_SLOTS]; /* in flight; 0: none */
    char *slots[MLC_STAGE_SLOTS];
    mlc_stage_counters counters;
} mlc_stager;

/* Load the driver (library: see mlc_cuda_open); nothing on the device yet. */
int mlc_stage_open(mlc_stager *st, const char *library, char *err, size_t errlen);
/* Free everything on the device and unload the driver. */
void mlc_stage_close(mlc_stager *st);
/* Which device holds ptr: MLC_OK and *ordinal; MLC_ERR_ARG: not CUDA device memory
 * (*host 1: memory CUDA knows as host memory, 0: memory CUDA does not know). */
int mlc_stage_device_of(mlc_stager *st, const void *ptr, int *ordinal, int *host);
/* Start a call on device `ordinal`: make its context current (the caller's is kept), set up
 * streams, events and slots of piece_bytes each for these settings where they differ from
 * the last call's, and order the call's copies after the work queued on caller_stream (a
 * CUstream; 0: the legacy default stream). */
int mlc_stage_begin(mlc_stager *st, int ordinal, int nstreams, int copies_per_stream, int64_t piece_bytes,
                    uintptr_t caller_stream, char *err, size_t errlen);
/* Piece `piece` down into slot piece % MLC_STAGE_SLOTS, once the slot's last upload is done. */
int mlc_stage_down(mlc_stager *st, int64_t piece, const mlc_stage_span *spans, int nspans);
/* Wait until piece's download is in its slot. */
int mlc_stage_wait_down(mlc_stager *st, int64_t piece);
/* Wait until the slot of `piece` is free: the upload of the piece it held before is done
 * (mlc_stage_down waits for it itself; a call with no downloads waits here). */
int mlc_stage_wait_up(mlc_stager *st, int64_t piece);
/* Piece `piece` up from its slot to the device. */
int mlc_stage_up(mlc_stager *st, int64_t piece, const mlc_stage_span *spans, int nspans);
/* Wait for every copy of the call, count their times, set the caller's context back. */
int mlc_stage_end(mlc_stager *st);
/* The host slot of a piece. */
char *mlc_stage_slot(const mlc_stager *st, int64_t piece);

#endif
