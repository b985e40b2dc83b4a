/* Plans: the one place that chooses how a request is carried out (the public
 * mlc_plan_make, declared in ml_comm.h with its structs). */
#ifndef MLC_PLAN_H
#define MLC_PLAN_H

#include "algos/algo.h"

/* Mid-sized requests are cut finer than chunk_bytes to keep every thread busy,
 * down to this size, below which per-message costs dominate. */
#define MLC_MIN_SEGMENT_BYTES (32 * 1024)

#endif
