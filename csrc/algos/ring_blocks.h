/* What the two ring halves share: the block layout of a segment and the clean-up
 * after a failed post. Included by reduce_scatter_ring.c, allgather_ring.c and
 * allreduce_ring.c only. */
#ifndef MLC_RING_BLOCKS_H
#define MLC_RING_BLOCKS_H

#include "algo.h"

#define MLC_RING_MAX_BATCH 8

/* Byte offset and length of block b of segment d (n balanced blocks). */
static inline void mlc_ring_block(const mlc_tp *tp, const mlc_algo_call *c, int d, int b,
                                  int64_t *off, int64_t *len) {
    mlc_block_range(c->segs[d].count, tp->size, b, off, len);
    *off *= c->elem_size;
    *len *= c->elem_size;
}

/* Scratch room per segment of the batch: its largest block. */
static inline int64_t mlc_ring_slot_bytes(const mlc_tp *tp, const mlc_algo_call *c) {
    int64_t max_count = 0;
    for (int d = 0; d < c->nseg; d++)
        if (c->segs[d].count > max_count) max_count = c->segs[d].count;
    return (max_count + tp->size - 1) / tp->size * c->elem_size;
}

/* A post failed: cancel the nrecv receives (reqs[0..]) and nsend sends
 * (reqs[nseg..]) already posted, so none is left behind, and return rc. */
static inline int mlc_ring_fail(mlc_tp *tp, mlc_tp_req *reqs, int nrecv, int nseg, int nsend, int rc) {
    mlc_tp_abandon(tp, nrecv, reqs);
    mlc_tp_abandon(tp, nsend, reqs + nseg);
    return rc;
}

#endif
