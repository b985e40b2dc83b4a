/* The signature's layout, shared by signature.c (making and digesting it) and
 * verdict.c (judging n of them; verdict_*.c name what differs).
 *
 * Compared, in two groups:
 *   shape     kind, dtype, op (allreduce), root (broadcast), ntensors, total,
 *             layout_hash, shapes_hash (each tensor's shape digest, where its
 *             caller said it), labels_hash (each tensor's label, where its
 *             front end gave one), part, nparts, call_dtypes, compression (the team's
 *             16-bit wire setting, whatever the request's dtype: ranks that
 *             differ would exchange blocks of different sizes on the ring); for
 *             kinds whose sizes differ by rank (sizes_vary) total and layout are
 *             not compared; row_elements and the rows' shape (the dimensions
 *             after the first: 2x3 and 3x2 rows differ) always are; cancelled (a
 *             keyed group whose step failed on that rank: signed when the group's
 *             signature waits for its last tensor, as with the finite check; else
 *             the group's seal, team/seal.c, tells the ranks);
 *   settings  the team's schedule (config_team's alg, ksteps, max_steps) and the
 *             request's plan (algorithm, on the caller's thread or the team's,
 *             lanes, segment length, keyed group, direct inside the check).
 * Ranks whose settings differ would run different message patterns (a hang) or
 * a pipelined rank would return a step early. A shape that differs makes the
 * plans differ too, so a message names the shapes when they differ and the
 * settings only when the shapes agree. A rank whose own check of its arguments
 * failed (bad_args: an alltoall's splits) signs that too, and the verdict fails
 * the request on every rank with MLC_ERR_ARG, naming each such rank and what was
 * wrong, before anything else is compared. The first counts (and the rows' first
 * dimensions) are kept for messages;
 * the stop flag, the NaN/Inf scan and the bytes sent ahead of the check ride along
 * (exchange.c). The digest is a
 * hash of every compared field: equal digests, equal signatures. Sent as bytes:
 * the ranks of one job share one architecture. */
#ifndef MLC_SIGNATURE_H
#define MLC_SIGNATURE_H

#include <stddef.h>

#include "agree.h"

#define MLC_SIG_SHOWN_COUNTS 4
#define MLC_SIG_SHOWN_DIMS 6

/* Compared across ranks; no padding, so the digest hashes only these bytes. */
typedef struct compared {
    int32_t kind, dtype, op, root;
    int32_t ntensors, part, nparts, call_dtypes;
    int32_t compression, sizes_vary;
    int32_t row_ndim, bad_args; /* row_ndim -1: the rows' shape not said */
    int64_t total, row_elements;
    uint64_t layout_hash;    /* FNV-1a over every tensor's count */
    uint64_t shapes_hash;    /* over every tensor's shape digest (mlc_tensor.shape) */
    uint64_t row_shape_hash; /* and over the rows' dimensions */
    uint64_t labels_hash;    /* over every tensor's label (mlc_tensor.label); 0: none */
    /* settings */
    int32_t team_algorithm, algorithm, on_caller, lanes, is_group, direct;
    int64_t ksteps, max_steps, seg_elems;
    int64_t cancelled; /* this keyed group was cancelled on this rank (its step failed) */
    /* the call (agree.h, mlc_call_id): compared first, by its own rule (mlc_judge) */
    int64_t step, call_index;
    uint64_t origin;
} compared;
/* The verdict compares the request up to the origin, which it judges by its own rule. */
_Static_assert(offsetof(compared, origin) + sizeof(uint64_t) == sizeof(compared), "origin is compared's last field");

struct mlc_signature {
    compared c;
    int32_t nonfinite_tensor; /* first tensor holding NaN/Inf; -1: none (or unchecked) */
    int32_t nonfinite_count;  /* how many tensors hold NaN/Inf */
    int32_t stop;             /* this rank asked to stop (mlc_agree_request_stop) */
    int32_t ahead;            /* bytes sent ahead to rank r+1 (at most one ring piece) */
    int64_t counts[MLC_SIG_SHOWN_COUNTS]; /* the first tensors' counts */
    int64_t row_dims[MLC_SIG_SHOWN_DIMS]; /* the rows' first dimensions */
    int64_t bad_detail[2];                /* what bad_args found (agree.h) */
    char origin_name[MLC_ORIGIN_NAME_LEN];    /* the calling thread, for messages */
};

#endif
