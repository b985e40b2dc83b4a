/* Plans: how one request is carried out, decided once when it is submitted.
 *
 * Allreduce, in this order:
 *   direct     under MLC_ALG_AUTO, when the agreement exchange runs anyway and the
 *              request is at most direct_bytes and not a keyed group: its data
 *              rides in the exchange (algos/allreduce_direct.c), nothing after;
 *   algorithm  the team's, or under MLC_ALG_AUTO recursive doubling below
 *              latency_bytes, Rabenseifner from there up to rabenseifner_bytes
 *              when the rank count is a power of two >= 4 and the values travel
 *              uncompressed (it has the ring's bytes in 2 log2(n) steps, not
 *              2(n-1); at 2 ranks the two are the same; 16-bit wire values keep
 *              the ring there), and the ring above (keyed groups: the ring, their
 *              tensors arrive segment by segment). At large rank counts, where
 *              the ring's blocks fall under MLC_RING_MIN_BLOCK_BYTES, every
 *              allreduce from latency_bytes up and every keyed group takes
 *              Rabenseifner, 16-bit wire values included, from 65 ranks at any
 *              count (the ranks above a power of two fold into one below it
 *              first): the ring's 2(n-1) latencies per segment would cost more
 *              than its bytes (at 1,024 ranks, 2,046 steps of 1 KiB blocks);
 *   thread     a blocking call runs on the caller's thread (one lane) up to
 *              latency_bytes for recursive doubling and up to inline_bytes for the
 *              ring: the hand-off to the team's threads and back costs more than
 *              the whole transfer below a few MiB; else on the team's threads;
 *   segments   chunk_bytes, or less so every lane gets a full batch, never below
 *              MLC_MIN_SEGMENT_BYTES; recursive doubling on the caller's thread
 *              takes the whole buffer as one segment;
 *   window     several tensors are packed segment by segment into fusion slots:
 *              the team's window, or one batch of the caller's buffer;
 *   aligned    several tensors over several segments: each tensor of a segment
 *              or more starts on a segment boundary (mlc_segment_aligned_starts),
 *              so that none of its segments is packed;
 *   wire       the team's compression (16-bit values on the wire) for float32
 *              requests that take the ring or Rabenseifner at more than one
 *              rank; other dtypes
 *              keep their own (float64 would lose more than the saving is worth,
 *              integers must stay exact, 16-bit ones save nothing), and the
 *              latency paths (direct, recursive doubling) stay float32: their
 *              cost is message latency, not bytes.
 * Min, max and product: as a sum, but never direct (the agreement exchange only
 * adds) and never with 16-bit values on the wire (the wire paths only add).
 * Broadcast: on the caller's thread up to latency_bytes (whole tensors), else
 * segments of chunk_bytes per tensor spread over the team's threads.
 * Collectives of rows (allgather, reduce-scatter, alltoall): their kind's row of
 * the table, on the blocking caller's thread, whole buffers.
 * A keyed group of one tensor up to submit_bytes (and inline_bytes) is not a group:
 * its submit reduces it then and there, as a blocking call (by_submit). */
#include <string.h>

#include "plan.h"

static void plan_broadcast(const mlc_plan_input *in, int64_t bytes, mlc_plan *p) {
    const int es = mlc_dtype_size(in->dtype);
    p->algorithm = -1;
    p->on_caller = in->blocking && bytes <= in->latency_bytes;
    p->lanes = p->on_caller ? 1 : in->nthreads;
    p->seg_elems = p->on_caller ? 0 : in->chunk_bytes / es; /* 0: whole tensors */
}

static int power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

/* The ring's wire path and the agreement exchange only add. */
static int adds(const mlc_plan_input *in) { return in->op == MLC_OP_SUM || in->op == MLC_OP_AVERAGE; }

/* 16-bit values on the wire: below the latency-bound rank counts the ring carries
 * them (what the 2-4-node figures measured), so the power-of-two rule skips them. */
static int compressed(const mlc_plan_input *in) {
    return in->dtype == MLC_FLOAT32 && in->compression != MLC_COMPRESSION_NONE;
}

/* Many ranks, and the ring's blocks (a chunk cut in one block per rank) too small to
 * fill a step (plan.h). */
static int ring_latency_bound(const mlc_plan_input *in) {
    return in->nranks > MLC_RING_LATENCY_RANKS && in->chunk_bytes / in->nranks < MLC_RING_MIN_BLOCK_BYTES;
}

static int choose_algorithm(const mlc_plan_input *in, int64_t bytes, int direct) {
    if (direct) return MLC_ALG_DIRECT;
    if (in->algorithm != MLC_ALG_AUTO) return in->algorithm;
    const int raben_over_ring = ring_latency_bound(in);
    if (in->is_group) return raben_over_ring ? MLC_ALG_RABENSEIFNER : MLC_ALG_RING;
    if (bytes < in->latency_bytes) return MLC_ALG_RECURSIVE_DOUBLING;
    if (raben_over_ring) return MLC_ALG_RABENSEIFNER;
    if (bytes < in->rabenseifner_bytes && in->nranks >= 4 && power_of_two(in->nranks) &&
        !(compressed(in) && adds(in)))
        return MLC_ALG_RABENSEIFNER;
    return MLC_ALG_RING;
}

static void plan_rows(const mlc_plan_input *in, mlc_plan *p) {
    p->algorithm = in->kind == MLC_KIND_ALLGATHER       ? MLC_ALG_ALLGATHERV_RING
                   : in->kind == MLC_KIND_REDUCESCATTER ? MLC_ALG_REDUCE_SCATTERV_RING
                                                        : MLC_ALG_ALLTOALLV_PAIRWISE;
    p->on_caller = 1;
    p->lanes = 1;
}

void mlc_plan_make(const mlc_plan_input *in, mlc_plan *p) {
    const int es = mlc_dtype_size(in->dtype);
    const int64_t bytes = in->total * es;
    memset(p, 0, sizeof *p);
    p->fused = in->ntensors > 1;
    p->by_submit = in->is_group && in->ntensors == 1 && bytes <= in->submit_bytes && bytes <= in->inline_bytes;
    if (in->kind == MLC_KIND_BROADCAST) {
        plan_broadcast(in, bytes, p);
        return;
    }
    if (in->kind != MLC_KIND_ALLREDUCE) {
        plan_rows(in, p);
        return;
    }
    p->direct = in->checked && in->algorithm == MLC_ALG_AUTO && !in->is_group && adds(in) &&
                bytes <= in->direct_bytes;
    p->algorithm = choose_algorithm(in, bytes, p->direct);
    p->nothing = in->blocking && !in->checked && (bytes == 0 || (in->nranks == 1 && in->in_place));
    if (p->direct || p->nothing) {
        p->on_caller = in->blocking;
        p->lanes = 1;
        return;
    }
    const int whole = p->algorithm == MLC_ALG_RECURSIVE_DOUBLING;
    p->on_caller = in->blocking && bytes <= (whole ? in->latency_bytes : in->inline_bytes);
    p->lanes = p->on_caller ? 1 : in->nthreads;
    if (p->on_caller && whole) {
        p->seg_elems = in->total > 0 ? in->total : 1;
    } else {
        p->seg_elems = mlc_segment_elems(in->total, in->chunk_bytes / es, p->lanes, MLC_RING_BATCH,
                                         MLC_MIN_SEGMENT_BYTES / es);
    }
    p->nseg = mlc_segment_count(in->total, p->seg_elems); /* aligned: the request recounts */
    p->aligned = p->fused && p->nseg > 1;
    const int wired = p->algorithm == MLC_ALG_RING || p->algorithm == MLC_ALG_RABENSEIFNER;
    p->compression = in->dtype == MLC_FLOAT32 && wired && in->nranks > 1 && adds(in) ? in->compression
                                                                                     : MLC_COMPRESSION_NONE;
    if (!p->fused) p->window = p->nseg;
    else p->window = p->on_caller ? (whole ? 1 : MLC_RING_BATCH) : in->window_segments;
}
