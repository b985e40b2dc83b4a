/* Schedules: which block, peer or thread each step uses. Pure functions of
 * (rank, size, step, counts) so that every rank derives the same plan with no
 * negotiation; tests/unit/test_schedules.py simulates them for 1..16 ranks. */
#include "base.h"

void mlc_block_range(int64_t count, int nblocks, int b, int64_t *offset, int64_t *length) {
    /* The first count % nblocks blocks get one extra element. */
    int64_t base = count / nblocks, extra = count % nblocks;
    *offset = b * base + (b < extra ? b : extra);
    *length = base + (b < extra ? 1 : 0);
}

/* Ring reduce-scatter: at step s a rank sends the block it has accumulated
 * s+1 contributions into and receives the next one; after size-1 steps it holds
 * the full sum of block (rank+1) mod size. Allgather then circulates the sums. */
int mlc_ring_rs_send_block(int rank, int size, int step) { return mlc_mod(rank - step, size); }
int mlc_ring_rs_recv_block(int rank, int size, int step) { return mlc_mod(rank - step - 1, size); }
int mlc_ring_ag_send_block(int rank, int size, int step) { return mlc_mod(rank + 1 - step, size); }
int mlc_ring_ag_recv_block(int rank, int size, int step) { return mlc_mod(rank - step, size); }

int64_t mlc_segment_count(int64_t total, int64_t seg_elems) {
    return seg_elems <= 0 ? 0 : (total + seg_elems - 1) / seg_elems;
}

int64_t mlc_segment_elems(int64_t total, int64_t chunk_elems, int nthreads, int batch, int64_t min_elems) {
    int64_t lanes = (int64_t)nthreads * batch;
    int64_t even = (total + lanes - 1) / lanes;
    int64_t seg = even < chunk_elems ? even : chunk_elems;
    if (seg < min_elems) seg = min_elems < chunk_elems ? min_elems : chunk_elems;
    return seg > 0 ? seg : 1;
}

/* A segment that spans two tensors is copied into a fusion slot and back; one inside
 * a tensor is reduced where it lies. So a large tensor starts a segment: only its
 * last segment is short, and none of its segments is copied. (Cut at fixed
 * offsets, ResNet-50's 29 tensors of 1 MiB and more spent a quarter of their
 * allreduce copying the segments across their boundaries.) The gap before such a
 * tensor ends where its first segment begins, so a segment never has a gap inside:
 * it only ever ends in one, and is cut short there (team/execute.c). */
int64_t mlc_segment_aligned_starts(const mlc_tensor *tensors, int ntensors, int64_t seg_elems,
                                   int64_t *starts) {
    int64_t at = 0;
    for (int i = 0; i < ntensors; i++) {
        if (seg_elems > 0 && tensors[i].count >= seg_elems) at = (at + seg_elems - 1) / seg_elems * seg_elems;
        starts[i] = at;
        at += tensors[i].count;
    }
    starts[ntensors] = at;
    return at;
}

/* Segment g lands in fusion slot g mod window_segments; a slot always belongs
 * to the same thread, so two requests never touch one slot from two threads. */
int mlc_segment_owner(int64_t g, int64_t window_segments, int nthreads) {
    return (int)((g % window_segments) % nthreads);
}

int mlc_rd_pow2_floor(int size) {
    int p = 1;
    while (p * 2 <= size) p *= 2;
    return p;
}

int mlc_rd_nsteps(int size) {
    int steps = 0;
    for (int p = mlc_rd_pow2_floor(size); p > 1; p /= 2) steps++;
    return steps;
}

/* Ranks past the largest power of two fold their data into rank - p2 first and
 * get the result back at the end. */
int mlc_rd_fold_partner(int rank, int size) {
    int p2 = mlc_rd_pow2_floor(size);
    if (rank >= p2) return rank - p2;
    if (rank < size - p2) return rank + p2;
    return -1;
}

int mlc_rd_partner(int rank, int size, int step) {
    if (rank >= mlc_rd_pow2_floor(size)) return -1;
    return rank ^ (1 << step);
}

/* Binomial tree on ranks relative to root: parent clears the lowest set bit. */
int mlc_binomial_parent(int rank, int root, int size) {
    int rel = mlc_mod(rank - root, size);
    if (rel == 0) return -1;
    return mlc_mod((rel & (rel - 1)) + root, size);
}

int mlc_binomial_children(int rank, int root, int size, int *children, int max_children) {
    int rel = mlc_mod(rank - root, size), n = 0;
    /* Children are rel + 2^k for 2^k below rel's lowest set bit (all k for the root),
     * listed largest subtree first so the deepest branch starts earliest. */
    int limit = rel == 0 ? size : (rel & -rel);
    int top = 1;
    while (top * 2 < limit) top *= 2;
    for (int k = top; k >= 1; k /= 2) {
        if (k >= limit || rel + k >= size) continue;
        if (n < max_children) children[n] = mlc_mod(rel + k + root, size);
        n++;
    }
    return n;
}

/* Pipelined teams. ksteps >= 0: calls 0..ksteps-1 are synchronous, then the team
 * pipelines for good (ksteps >= max_steps: synchronous throughout). ksteps = -k:
 * pipelined from call 0, synchronous for the last k of max_steps calls. Entering
 * the pipeline returns zeros (the previous average was already returned
 * synchronously); leaving it returns the in-flight average plus this call's, so
 * every call's gradients are returned exactly once, except the last call's
 * while a team is still pipelined when training stops. */
int mlc_step_phase(int64_t call, int64_t ksteps, int64_t max_steps) {
    if (ksteps >= max_steps) return MLC_STEP_SYNC;
    int64_t start = ksteps >= 0 ? ksteps : 0;
    int64_t stop = ksteps >= 0 ? -1 : max_steps + ksteps; /* first synchronous call again */
    if (stop == 0) return MLC_STEP_SYNC;                   /* ksteps = -max_steps */
    if (call < start) return MLC_STEP_SYNC;
    if (call == start) return MLC_STEP_PIPELINE_START;
    if (stop < 0 || call < stop) return MLC_STEP_PIPELINED;
    return call == stop ? MLC_STEP_DRAIN : MLC_STEP_SYNC;
}

/* Horovod's split of a reduce-scatter: rows / size each, the first rows % size ranks
 * one more, in rank order. */
int64_t mlc_rows_share(int64_t rows, int size, int rank) {
    return rows / size + (rank < rows % size ? 1 : 0);
}
int64_t mlc_rows_first(int64_t rows, int size, int rank) {
    const int64_t extra = rows % size;
    return rank * (rows / size) + (rank < extra ? rank : extra);
}

/* Allgatherv: at step s rank r forwards block r-s (its own at step 0) to r+1 and
 * receives block r-s-1 from r-1. */
int mlc_ring_gatherv_send_block(int rank, int size, int step) { return mlc_mod(rank - step, size); }
int mlc_ring_gatherv_recv_block(int rank, int size, int step) { return mlc_mod(rank - step - 1, size); }

mlc_gatherv_cursor mlc_gatherv_start(int rank, int size, int send) {
    return (mlc_gatherv_cursor){rank, size, send != 0, 0, 0};
}

int mlc_gatherv_next(mlc_gatherv_cursor *c, const int64_t *block_bytes, int64_t piece_bytes,
                     mlc_gatherv_piece *piece) {
    if (piece_bytes <= 0) return 0;
    for (; c->step < c->size - 1; c->step++, c->offset = 0) {
        const int block = c->send ? mlc_ring_gatherv_send_block(c->rank, c->size, c->step)
                                  : mlc_ring_gatherv_recv_block(c->rank, c->size, c->step);
        const int64_t left = block_bytes[block] - c->offset;
        if (left <= 0) continue;
        *piece = (mlc_gatherv_piece){block, c->offset, left < piece_bytes ? left : piece_bytes};
        c->offset += piece->bytes;
        return 1;
    }
    return 0;
}

int mlc_pairwise_send_peer(int rank, int size, int step) { return mlc_mod(rank + step, size); }
int mlc_pairwise_recv_peer(int rank, int size, int step) { return mlc_mod(rank - step, size); }
