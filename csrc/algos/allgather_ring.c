/* Ring allgather over a batch of segments, the second half of the ring
 * allreduce (allreduce_ring.c): it starts where reduce_scatter_ring.c ends, each
 * rank r holding the final block (r+1) of every segment.
 *
 * Steps, n ranks: at step s = 0..n-2 rank r sends block (r+1-s) to rank r+1 and
 * receives block (r-s) from rank r-1 straight into place. Bytes on the wire per
 * rank: (n-1)/n * N * elem_size each way; with 16-bit values on the wire
 * (compression, float32 only) (n-1)/n * N * 2: half. Blocks are copied, never
 * recomputed, so every rank ends with the bits of the rank that summed each block.
 * Compression: the owner first rounds its float32 total to 16 bits into the
 * segment's wire image and keeps exactly that value, widened back to float32, as
 * its own result; the other ranks receive the same 16 bits into their wire image,
 * forward them unchanged and widen them, so every rank holds the same bits.
 * float16 overflow: a total (or a partial sum on the way) beyond +-65504 is Inf
 * on the wire. Every rank sees every block's 16 bits (its own when rounding it,
 * the others when widening them), the same bits everywhere, so every rank finds
 * the same NaN/Inf, finishes the steps and fails the call with MLC_ERR_OVERFLOW:
 * alike on every rank without a message more. bfloat16 has float32's range: a
 * NaN/Inf there came from the input and is passed on, as without compression. */
#include "algo.h"
#include "ring_blocks.h"

/* Where block b of segment d is received into and sent from: in place, or its wire image. */
static char *travels(const mlc_tp *tp, const mlc_algo_call *c, int d, int b, int64_t *len) {
    int64_t off, count;
    if (mlc_ring_wired(c)) return mlc_ring_wire_block(tp, c, d, b, len, &count);
    mlc_ring_block(tp, c, d, b, &off, len);
    return c->segs[d].data + off;
}

/* Round (own == 1) or widen block b of segment d between its wire image and its
 * float32 place; 1 when a 16-bit value is NaN/Inf. */
static int convert(const mlc_tp *tp, const mlc_algo_call *c, int d, int b, int own) {
    int64_t off, len, bytes, count;
    mlc_ring_block(tp, c, d, b, &off, &len);
    char *wire = mlc_ring_wire_block(tp, c, d, b, &bytes, &count);
    float *data = (float *)(c->segs[d].data + off);
    return own ? mlc_wire_round(data, wire, count, c->compression)
               : mlc_wire_unpack(data, wire, count, c->compression);
}

int mlc_allgather_ring(mlc_tp *tp, const mlc_algo_call *c) {
    mlc_tp_req reqs[2 * MLC_RING_MAX_BATCH];
    const int n = tp->size, r = tp->rank;
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    const int wired = mlc_ring_wired(c);
    int64_t len;
    int rc, special = 0;

    for (int d = 0; wired && d < c->nseg; d++) special |= convert(tp, c, d, mlc_ring_ag_send_block(r, n, 0), 1);
    for (int s = 0; s < n - 1; s++) {
        for (int d = 0; d < c->nseg; d++) {
            char *in = travels(tp, c, d, mlc_ring_ag_recv_block(r, n, s), &len);
            if ((rc = mlc_tp_irecv(tp, in, len, left, c->segs[d].tag, &reqs[d])))
                return mlc_ring_fail(tp, reqs, d, c->nseg, d, rc);
            char *out = travels(tp, c, d, mlc_ring_ag_send_block(r, n, s), &len);
            rc = mlc_tp_isend(tp, out, len, right, c->segs[d].tag, &reqs[c->nseg + d]);
            if (rc) return mlc_ring_fail(tp, reqs, d + 1, c->nseg, d, rc);
        }
        if ((rc = mlc_tp_waitall(tp, 2 * c->nseg, reqs))) return rc;
        for (int d = 0; wired && d < c->nseg; d++) special |= convert(tp, c, d, mlc_ring_ag_recv_block(r, n, s), 0);
    }
    return special && c->compression == MLC_COMPRESSION_FP16 ? MLC_ERR_OVERFLOW : MLC_OK;
}
