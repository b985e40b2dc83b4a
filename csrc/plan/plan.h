/* Plans: the one place that chooses how a request is carried out (the public
 * mlc_plan_make, declared in ml_comm.h with its structs). */
#ifndef MLC_PLAN_H
#define MLC_PLAN_H

#include "algos/algo.h"

/* Mid-sized requests are cut finer than chunk_bytes to keep every thread busy,
 * down to this size, below which per-message costs dominate. */
#define MLC_MIN_SEGMENT_BYTES (32 * 1024)
/* The ring cuts a segment into one block per rank; below this block size each of its
 * 2(n-1) steps costs more message latency than transfer (16 KiB: 1.6 us at 10 GB/s, a
 * fast network's per-message latency), and above MLC_RING_LATENCY_RANKS ranks the plan
 * turns to Rabenseifner's 2 log2(n) steps. With 1 MiB chunks: from 65 ranks. Up to 64
 * ranks the ring stays whatever the chunk (the path measured on the test bed, and the
 * scale model finds the two within 0.05 ms a step at 64 nodes). */
#define MLC_RING_MIN_BLOCK_BYTES (16 * 1024)
#define MLC_RING_LATENCY_RANKS 64

/* A team's thresholds until its settings change them (mlc_team_set_*_threshold);
 * docs/tuning.md and benchmarks/RESULTS.md say why. */
#define MLC_DEFAULT_LATENCY_BYTES (512 * 1024)
#define MLC_DEFAULT_INLINE_BYTES (4 * 1024 * 1024)
/* At 4 test-bed nodes the ring matches it at 8 MiB and wins from 16 MiB
 * (benchmarks/RESULTS.md, "Three and four nodes, 2 Gbit/s"). */
#define MLC_DEFAULT_RABENSEIFNER_BYTES (8 * 1024 * 1024)
/* A keyed group of one tensor up to this size is reduced by its submit, then and there:
 * the hand-off to the team's threads and back costs more than the transfer, and with one
 * tensor there is nothing to overlap; above it the team's threads, several lanes at once,
 * measured faster (benchmarks/RESULTS.md). */
#define MLC_DEFAULT_SUBMIT_BYTES (1024 * 1024)

#endif
