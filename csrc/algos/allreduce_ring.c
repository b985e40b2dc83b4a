/* Pipelined ring allreduce: reduce_scatter_ring.c, then allgather_ring.c.
 *
 * Steps, n ranks: the reduce-scatter leaves rank r with the total of block (r+1)
 * of each segment (for an average divided by n, once, as its last addition
 * lands); the allgather then copies every total to every rank.
 * Bytes on the wire per rank: 2(n-1)/n * N * elem_size sent and as many
 * received, the bandwidth optimum whatever n is; with 16-bit values on the wire
 * (the team's compression, float32 requests the plan gives it) 2(n-1)/n * N * 2:
 * half, for one rounding to 16 bits per hop of a partial sum and one of the total
 * (added in float32; every rank keeps the total's 16 bits, widened: same bits on
 * every rank). float16's range is checked: an overflow fails the call on every
 * rank (allgather_ring.c). Cost: 2(n-1) message latencies
 * per segment, which is why small buffers take allreduce_recursive_doubling.c or
 * allreduce_direct.c. A thread runs a batch of segments in lock step (up to
 * MLC_RING_MAX_BATCH) so one segment's transfer overlaps another's reduction;
 * the team's threads run their own batches at the same time on their own
 * communicators. Scratch: the batch's largest block, once per segment; with
 * compression the largest segment's wire image (N * 2 bytes), once per segment.
 * Out of place (a segment with an input): reduce_scatter_ring.c reads the input
 * and writes every block it reduces to the output, the allgather the rest. */
#include "algo.h"
#include "ring_blocks.h"

int mlc_allreduce_ring(mlc_tp *tp, const mlc_algo_call *c) {
    const int n = tp->size;
    int rc;

    if (c->nseg > MLC_RING_MAX_BATCH) return MLC_ERR_ARG;
    if (n > 1 && mlc_ring_scratch_bytes(tp, c) > c->scratch_bytes) return MLC_ERR_ARG;
    if (c->compression != MLC_COMPRESSION_NONE && c->dtype != MLC_FLOAT32) return MLC_ERR_ARG;
    if (n == 1) { /* nothing to exchange: an out-of-place input is the result */
        for (int d = 0; d < c->nseg; d++) mlc_segment_copy_input(&c->segs[d], c->elem_size);
        return MLC_OK;
    }
    if ((rc = mlc_reduce_scatter_ring(tp, c))) return rc; /* an average's totals divided */
    return mlc_allgather_ring(tp, c);
}
