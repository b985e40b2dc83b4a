/* What the two ring halves share: the block layout of a segment and the clean-up
 * after a failed post. Included by reduce_scatter_ring.c, allgather_ring.c and
 * allreduce_ring.c, and by allreduce_rabenseifner.c for the wire image's size. */
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

/* Under compression each segment of the batch has a wire image in scratch: all
 * its n blocks at 16 bits each. The reduce-scatter packs the block it sends and
 * receives another into it; the allgather forwards blocks from it unchanged. */
static inline int mlc_ring_wired(const mlc_algo_call *c) { return c->compression != MLC_COMPRESSION_NONE; }

static inline int64_t mlc_ring_wire_slot_bytes(const mlc_algo_call *c) {
    int64_t max_count = 0;
    for (int d = 0; d < c->nseg; d++)
        if (c->segs[d].count > max_count) max_count = c->segs[d].count;
    return (max_count * mlc_wire_size(c->compression) + 7) / 8 * 8;
}

/* Scratch the batch needs: a received block per segment, or a wire image per segment. */
static inline int64_t mlc_ring_scratch_bytes(const mlc_tp *tp, const mlc_algo_call *c) {
    return c->nseg * (mlc_ring_wired(c) ? mlc_ring_wire_slot_bytes(c) : mlc_ring_slot_bytes(tp, c));
}

/* Block b of segment d in its wire image: address, length in bytes and in elements. */
static inline char *mlc_ring_wire_block(const mlc_tp *tp, const mlc_algo_call *c, int d, int b,
                                        int64_t *bytes, int64_t *count) {
    int64_t off;
    mlc_block_range(c->segs[d].count, tp->size, b, &off, count);
    const int ws = mlc_wire_size(c->compression);
    *bytes = *count * ws;
    return c->scratch + d * mlc_ring_wire_slot_bytes(c) + off * ws;
}

/* A post failed: cancel the nrecv receives (reqs[0..]) and nsend sends
 * (reqs[nseg..]) already posted, so none is left behind, and return rc. */
static inline int mlc_ring_fail(mlc_tp *tp, mlc_tp_req *reqs, int nrecv, int nseg, int nsend, int rc) {
    mlc_tp_abandon(tp, nrecv, reqs);
    mlc_tp_abandon(tp, nsend, reqs + nseg);
    return rc;
}

#endif
