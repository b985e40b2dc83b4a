/* Reductions and broadcasts of CUDA device buffers: staged through pinned host memory
 * (cuda/stage.c) piece by piece, each piece carried out by the host path as one blocking
 * request of the team.
 *
 * Steps of a call of T bytes, pieces of P bytes (the team's piece_bytes), ceil(T / P) pieces:
 *   1. every tensor's memory is looked up: device memory, all on one device, or the call
 *      fails on every rank (a rank's fault travels in its first request's signature);
 *   2. the copies wait for the work queued on the caller's stream;
 *   3. piece 0 comes down; for each piece k: piece k+1 starts down, piece k's download is
 *      waited for, piece k is reduced (or broadcast) in its host slot by the team, as a request
 *      whose tensor list is the call's whole list, each tensor's part of the piece (so every
 *      request is checked against the call's layout: counts in the piece, each tensor's shape
 *      digest), and piece k starts up;
 *   4. every copy is waited for: the results are on the device when the call returns.
 * With the finite check every piece comes down once more first, to be scanned (scan_first).
 * Bytes on the wire: the host path's for each piece. Bytes over PCIe: T down and T up
 * (a broadcast's root: T down; its other ranks: T up).
 * A CUDA failure on one rank at piece k fails piece k's request on every rank, naming it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "team.h"

#define MLC_DEFAULT_PIECE_BYTES (16 << 20)
#define MLC_DEFAULT_CUDA_STREAMS 2
#define MLC_DEFAULT_COPIES_PER_STREAM 8

void mlc_device_init(mlc_team *team) {
    pthread_mutex_init(&team->device.lock, NULL);
    team->device.nstreams = MLC_DEFAULT_CUDA_STREAMS;
    team->device.copies_per_stream = MLC_DEFAULT_COPIES_PER_STREAM;
    team->device.piece_bytes = MLC_DEFAULT_PIECE_BYTES;
}

void mlc_device_destroy(mlc_team *team) {
    if (team->device.stager) {
        mlc_stage_close(team->device.stager);
        free(team->device.stager);
    }
    pthread_mutex_destroy(&team->device.lock);
}

int mlc_team_set_device_staging(mlc_team *team, int nstreams, int copies_per_stream, int64_t piece_bytes,
                                const char *cuda_library) {
    if (!team || nstreams < 1 || nstreams > MLC_STAGE_MAX_STREAMS || copies_per_stream < 1 || piece_bytes < 8 ||
        (cuda_library && strlen(cuda_library) >= sizeof team->device.library))
        return MLC_ERR_ARG;
    pthread_mutex_lock(&team->device.lock);
    team->device.nstreams = nstreams;
    team->device.copies_per_stream = copies_per_stream;
    team->device.piece_bytes = piece_bytes / 8 * 8;
    snprintf(team->device.library, sizeof team->device.library, "%s", cuda_library ? cuda_library : "");
    pthread_mutex_unlock(&team->device.lock);
    return MLC_OK;
}

void mlc_team_get_device_stats(mlc_team *team, mlc_device_stats *out) {
    memset(out, 0, sizeof *out);
    if (!team) return;
    pthread_mutex_lock(&team->device.lock);
    out->calls = team->device.calls;
    if (team->device.stager) {
        const mlc_stage_counters *c = &team->device.stager->counters;
        out->bytes_down = c->bytes_down;
        out->bytes_up = c->bytes_up;
        out->seconds_down = c->seconds_down;
        out->seconds_up = c->seconds_up;
    }
    pthread_mutex_unlock(&team->device.lock);
}

/* What a call does to each piece, and what it needs of the pieces. */
typedef struct staged_call {
    mlc_team *team;
    int kind, dtype, op, root, part, nparts, call_dtypes;
    const mlc_tensor *tensors; /* the caller's, in device memory */
    int ntensors;
    int64_t total, piece_elems, npieces;
    int down, up; /* whether this rank's pieces come down and go up */
} staged_call;

/* Step 1: the device of the call's memory, or what is wrong (MLC_BAD_*, detail). */
static int find_device(mlc_stager *st, const mlc_tensor *tensors, int ntensors, int *ordinal, int64_t detail[2]) {
    *ordinal = -1;
    for (int i = 0; i < ntensors; i++) {
        const void *ends[2] = {tensors[i].data, tensors[i].source};
        for (int e = 0; e < 2 && tensors[i].count > 0; e++) {
            int device, host;
            if (!ends[e]) continue;
            if (mlc_stage_device_of(st, ends[e], &device, &host) != MLC_OK) {
                detail[0] = i;
                detail[1] = host;
                return MLC_BAD_DEVICE_MEMORY;
            }
            if (*ordinal >= 0 && device != *ordinal) {
                detail[0] = i;
                detail[1] = device;
                return MLC_BAD_DEVICE_MIXED;
            }
            *ordinal = device;
        }
    }
    return MLC_BAD_NONE;
}

/* The caller's tensors' parts in piece k: host tensors in the piece's slot (counts 0 outside
 * it, every tensor's shape digest kept), and the spans its copies move (source: down). */
static int piece_layout(const staged_call *c, mlc_stager *st, int64_t k, mlc_tensor *host, mlc_stage_span *down,
                        mlc_stage_span *up) {
    const int64_t es = mlc_dtype_size(c->dtype), lo = k * c->piece_elems, hi = lo + c->piece_elems;
    char *slot = st ? mlc_stage_slot(st, k) : NULL;
    int nspans = 0;
    int64_t start = 0;
    for (int i = 0; i < c->ntensors; i++) {
        const mlc_tensor *t = &c->tensors[i];
        const int64_t a = start > lo ? start : lo, b = start + t->count < hi ? start + t->count : hi;
        const int64_t shape = t->shape ? t->shape : mlc_shape_digest(1, &t->count);
        host[i] = (mlc_tensor){NULL, NULL, 0, (uint64_t)shape, 0};
        if (b > a) {
            const int64_t skip = (a - start) * es, at = (a - lo) * es, bytes = (b - a) * es;
            host[i].data = slot + at;
            host[i].count = b - a;
            const char *from = t->source ? (const char *)t->source : (const char *)t->data;
            down[nspans] = (mlc_stage_span){(CUdeviceptr)(uintptr_t)(from + skip), at, bytes};
            up[nspans] = (mlc_stage_span){(CUdeviceptr)(uintptr_t)((char *)t->data + skip), at, bytes};
            nspans++;
        }
        start += t->count;
    }
    return nspans;
}

static int run_piece(const staged_call *c, const mlc_tensor *host, char *err, size_t errlen) {
    if (c->kind == MLC_KIND_BROADCAST)
        return mlc_team_broadcast_part(c->team, host, c->ntensors, c->dtype, c->root, c->part, c->nparts,
                                       c->call_dtypes, err, errlen);
    return mlc_team_allreduce_part(c->team, host, c->ntensors, c->dtype, c->op, c->part, c->nparts, c->call_dtypes,
                                   err, errlen);
}

/* A piece's host tensors and copies, one entry per tensor of the call. */
typedef struct piece_lists {
    mlc_tensor *host;
    mlc_stage_span *down, *up, *ahead; /* ahead: the next piece's downloads */
} piece_lists;

static int lists_alloc(piece_lists *l, int ntensors, int *bad, int64_t detail[2]) {
    const size_t n = ntensors ? (size_t)ntensors : 1;
    l->host = malloc(n * sizeof *l->host);
    l->down = malloc(n * sizeof *l->down);
    l->up = malloc(n * sizeof *l->up);
    l->ahead = malloc(n * sizeof *l->ahead);
    if (l->host && l->down && l->up && l->ahead) return 1;
    *bad = MLC_BAD_NO_BUFFER;
    detail[0] = 0;
    detail[1] = (int64_t)(n * sizeof *l->host);
    return 0;
}

static void lists_free(piece_lists *l) {
    free(l->host);
    free(l->down);
    free(l->up);
    free(l->ahead);
}

/* Piece k in its slot, piece k+1 on its way down (piece 0 started first, where k is 0). */
static int piece_down(const staged_call *c, mlc_stager *st, int64_t k, piece_lists *l) {
    int cu = MLC_CU_SUCCESS;
    if (k == 0) cu = mlc_stage_down(st, 0, l->ahead, piece_layout(c, st, 0, l->host, l->ahead, l->up));
    if (cu == MLC_CU_SUCCESS && k + 1 < c->npieces)
        cu = mlc_stage_down(st, k + 1, l->ahead, piece_layout(c, st, k + 1, l->host, l->ahead, l->up));
    return cu == MLC_CU_SUCCESS ? mlc_stage_wait_down(st, k) : cu;
}

static void cuda_fault(int cu, int *bad, int64_t detail[2]) {
    *bad = MLC_BAD_CUDA;
    detail[0] = cu;
    detail[1] = 1;
}

/* With the finite check, a reduction fails before any piece moves where some rank's input
 * holds NaN/Inf, as a host call does: every piece comes down and is scanned first, and the
 * ranks compare what they found in a request of its own. MLC_OK: nothing found on any rank. */
static int scan_first(const staged_call *c, mlc_stager *st, int *bad, int64_t detail[2], char *err, size_t errlen) {
    int first = -1, count = 0, cu;
    char *found = calloc(c->ntensors ? c->ntensors : 1, 1);
    piece_lists l;
    if (lists_alloc(&l, c->ntensors, bad, detail) && !found) *bad = MLC_BAD_NO_BUFFER;
    for (int64_t k = 0; st && !*bad && k < c->npieces; k++) {
        if ((cu = piece_down(c, st, k, &l)) != MLC_CU_SUCCESS) {
            cuda_fault(cu, bad, detail);
            break;
        }
        piece_layout(c, st, k, l.host, l.down, l.up);
        for (int i = 0; i < c->ntensors; i++)
            if (l.host[i].count > 0 && !found[i] && mlc_has_nonfinite(l.host[i].data, l.host[i].count, c->dtype)) {
                found[i] = 1;
                count++;
                if (first < 0) first = i;
            }
    }
    free(found);
    lists_free(&l);
    if (*bad) return MLC_OK; /* the pieces' first request carries the fault */
    return mlc_run_scanned(c->team, c->dtype, c->op, c->part, c->nparts, c->call_dtypes, first, count, err, errlen);
}

/* Steps 2-4, with this rank's fault (bad) where step 1 or the staging found one: the request
 * of the piece where a fault is found carries it, so every rank's call fails there. */
static int run_pieces(staged_call *c, mlc_stager *st, int bad, int64_t detail[2], char *err, size_t errlen) {
    piece_lists l;
    int rc = MLC_OK, cu;
    lists_alloc(&l, c->ntensors, &bad, detail);
    for (int64_t k = 0; k < c->npieces; k++) {
        if (!bad && st && c->down && (cu = piece_down(c, st, k, &l)) != MLC_CU_SUCCESS) cuda_fault(cu, &bad, detail);
        /* A piece that does not come down waits for its slot's last upload instead. */
        if (!bad && st && !c->down && (cu = mlc_stage_wait_up(st, k)) != MLC_CU_SUCCESS) cuda_fault(cu, &bad, detail);
        if (bad) {
            rc = mlc_run_faulted(c->team, c->kind, c->dtype, c->op, c->root, c->part, c->nparts, c->call_dtypes,
                                 bad, detail, err, errlen);
            break;
        }
        const int nspans = piece_layout(c, st, k, l.host, l.down, l.up);
        if ((rc = run_piece(c, l.host, err, errlen))) break;
        if (st && c->up && (cu = mlc_stage_up(st, k, l.up, nspans)) != MLC_CU_SUCCESS) {
            cuda_fault(cu, &bad, detail); /* the next piece's request says so to every rank */
            if (k + 1 == c->npieces) {    /* none: the others' results are whole, this rank's not */
                char name[64];
                snprintf(err, errlen, "copying the results back to CUDA device %d failed (%s)", st->ordinal,
                         mlc_cuda_error_name(&st->cu, cu, name, sizeof name));
                rc = MLC_ERR_STATE;
            }
        }
    }
    lists_free(&l);
    return rc;
}

static int staged(staged_call *c, uintptr_t stream, int caller_fault, int64_t caller_tensor, char *err,
                  size_t errlen) {
    mlc_team *team = c->team;
    mlc_team_device *dev = &team->device;
    int64_t detail[2] = {caller_tensor, 0};
    int bad = caller_fault == MLC_DEVICE_FAULT_HOST_ARRAY      ? MLC_BAD_DEVICE_HOST_ARRAY
              : caller_fault == MLC_DEVICE_FAULT_NOT_CONTIGUOUS ? MLC_BAD_DEVICE_LAYOUT
                                                               : MLC_BAD_NONE;
    c->total = 0;
    for (int i = 0; i < c->ntensors; i++) c->total += c->tensors[i].count;
    pthread_mutex_lock(&dev->lock);
    const int64_t es = mlc_dtype_size(c->dtype);
    c->piece_elems = dev->piece_bytes / es;
    c->npieces = c->total > 0 ? (c->total + c->piece_elems - 1) / c->piece_elems : 1;
    char why[MLC_MSG_LEN] = "";
    if (!bad && c->total > 0 && !dev->stager) {
        mlc_stager *st = calloc(1, sizeof *st);
        if (st && mlc_stage_open(st, dev->library, why, sizeof why) == MLC_OK) dev->stager = st;
        else {
            free(st);
            bad = MLC_BAD_NO_CUDA;
        }
    }
    mlc_stager *st = c->total > 0 && !bad ? dev->stager : NULL;
    int ordinal = -1, begun = 0;
    if (st) bad = find_device(st, c->tensors, c->ntensors, &ordinal, detail);
    if (st && !bad) {
        int cu = mlc_stage_begin(st, ordinal, dev->nstreams, dev->copies_per_stream, dev->piece_bytes, stream, why,
                                 sizeof why);
        if (cu != MLC_OK) {
            bad = MLC_BAD_CUDA;
            detail[0] = cu;
            detail[1] = 0;
        } else
            begun = 1;
    }
    int rc = MLC_OK;
    if (c->kind == MLC_KIND_ALLREDUCE && team->agree.finite && mlc_dtype_is_float(c->dtype) && !bad)
        rc = scan_first(c, begun ? st : NULL, &bad, detail, err, errlen);
    if (rc == MLC_OK) rc = run_pieces(c, begun ? st : NULL, bad, detail, err, errlen);
    if (begun) {
        int cu = mlc_stage_end(st);
        if (cu != MLC_CU_SUCCESS && rc == MLC_OK) {
            char name[64];
            snprintf(err, errlen, "waiting for the copies to CUDA device %d failed (%s)", ordinal,
                     mlc_cuda_error_name(&st->cu, cu, name, sizeof name));
            rc = MLC_ERR_STATE;
        }
    }
    if (rc != MLC_OK && why[0] && err && errlen) { /* this rank's own words on what failed */
        size_t used = strlen(err);
        snprintf(err + used, errlen - used, "; on this rank: %s", why);
    }
    dev->calls++;
    pthread_mutex_unlock(&dev->lock);
    return rc;
}

static int bad_call(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int part, int nparts,
                    int call_dtypes) {
    if (!team || ntensors < 0 || (ntensors > 0 && !tensors) || dtype < 0 || dtype >= MLC_NUM_DTYPES ||
        nparts < 1 || part < 0 || part >= nparts || call_dtypes < 0 || call_dtypes >= (1 << MLC_NUM_DTYPES))
        return 1;
    for (int i = 0; i < ntensors; i++)
        if (tensors[i].count < 0) return 1;
    return 0;
}

int mlc_team_allreduce_device(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int op,
                              int part, int nparts, int call_dtypes, uintptr_t stream, int fault,
                              int64_t fault_tensor, char *err, size_t errlen) {
    if (bad_call(team, tensors, ntensors, dtype, part, nparts, call_dtypes) || op < 0 || op >= MLC_NUM_OPS ||
        !mlc_dtype_is_reducible(dtype)) {
        if (err && errlen) snprintf(err, errlen, "invalid device allreduce arguments (dtype, op, part, or tensor list)");
        return MLC_ERR_ARG;
    }
    staged_call c = {team, MLC_KIND_ALLREDUCE, dtype, op, 0, part, nparts, call_dtypes, tensors, ntensors,
                     0, 0, 0, 1, 1};
    return staged(&c, stream, fault, fault_tensor, err, errlen);
}

int mlc_team_broadcast_device(mlc_team *team, const mlc_tensor *tensors, int ntensors, int dtype, int root,
                              int part, int nparts, int call_dtypes, uintptr_t stream, int fault,
                              int64_t fault_tensor, char *err, size_t errlen) {
    if (bad_call(team, tensors, ntensors, dtype, part, nparts, call_dtypes) || root < 0 ||
        root >= team->ctx->size) {
        if (err && errlen) snprintf(err, errlen, "invalid device broadcast arguments (dtype, root, part, or tensor list)");
        return MLC_ERR_ARG;
    }
    const int is_root = team->ctx->rank == root;
    staged_call c = {team, MLC_KIND_BROADCAST, dtype, 0, root, part, nparts, call_dtypes, tensors, ntensors,
                     0, 0, 0, is_root, !is_root};
    return staged(&c, stream, fault, fault_tensor, err, errlen);
}
