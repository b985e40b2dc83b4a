/* ml_comm's internals that the C core's layers share and its tests read: the schedules
 * (pure functions, tested without MPI), the plan of a request and the algorithm table.
 * Not part of the public API (ml_comm.h); like it, a cffi declaration (the tests' build,
 * tests/unit/core_internals.py), so it holds no preprocessor lines: csrc/base/base.h
 * includes it after ml_comm.h. */

/* ---- schedules ---- */
/* Balanced partition of count elements into nblocks: block b's offset/length. */
void mlc_block_range(int64_t count, int nblocks, int b, int64_t *offset, int64_t *length);
/* Ring: the block a rank sends / receives at a reduce-scatter or allgather step. */
int mlc_ring_rs_send_block(int rank, int size, int step);
int mlc_ring_rs_recv_block(int rank, int size, int step);
int mlc_ring_ag_send_block(int rank, int size, int step);
int mlc_ring_ag_recv_block(int rank, int size, int step);
/* Segments: total elements cut into segments of seg_elems; fusion window of
 * window_segments segments; thread that owns segment g. */
int64_t mlc_segment_count(int64_t total, int64_t seg_elems);
/* Segment length for a request: chunk_elems, or less so that every thread gets
 * a full ring batch, but never below min_elems. */
int64_t mlc_segment_elems(int64_t total, int64_t chunk_elems, int nthreads, int batch, int64_t min_elems);
int mlc_segment_owner(int64_t g, int64_t window_segments, int nthreads);
/* Where each tensor starts in a fused request's segment layout: in list order, a
 * tensor of at least seg_elems elements on the next segment boundary (the gap
 * before it belongs to no tensor), smaller ones right after the one before.
 * starts has ntensors + 1 entries; returns the layout's length, gaps included. */
int64_t mlc_segment_aligned_starts(const mlc_tensor *tensors, int ntensors, int64_t seg_elems,
                                   int64_t *starts);
/* Ring of variable blocks (allgatherv): the block rank sends / receives at a step, from
 * its own block on. The reduce-scatterv runs the streams of rank r-1, ending on block r. */
int mlc_ring_gatherv_send_block(int rank, int size, int step);
int mlc_ring_gatherv_recv_block(int rank, int size, int step);
/* The same ring pipelined: a rank's send stream (its own block, then the blocks it
 * forwards) and its receive stream, both in ring order, cut into pieces of at most
 * piece_bytes that never cross a block (empty blocks have none). A rank's send stream is
 * its right neighbour's receive stream, piece for piece. Start a cursor, then take
 * pieces until mlc_gatherv_next returns 0. */
typedef struct mlc_gatherv_cursor {
    int rank, size, send, step; /* step: the stream's block index, 0 .. size-2 */
    int64_t offset;             /* bytes of that block already given out */
} mlc_gatherv_cursor;
typedef struct mlc_gatherv_piece {
    int block;
    int64_t offset, bytes;
} mlc_gatherv_piece;
mlc_gatherv_cursor mlc_gatherv_start(int rank, int size, int send);
int mlc_gatherv_next(mlc_gatherv_cursor *cursor, const int64_t *block_bytes, int64_t piece_bytes,
                     mlc_gatherv_piece *piece);
/* Pairwise exchange, steps 1..size-1: whom rank sends to and receives from. */
int mlc_pairwise_send_peer(int rank, int size, int step);
int mlc_pairwise_recv_peer(int rank, int size, int step);
/* Recursive doubling with a fold for non-powers of two. */
int mlc_rd_pow2_floor(int size);
int mlc_rd_fold_partner(int rank, int size); /* -1: rank takes no part in the fold */
int mlc_rd_partner(int rank, int size, int step); /* -1: rank idles in the doubling */
int mlc_rd_nsteps(int size);
/* Plans (csrc/plan/plan.c): how one request is carried out, chosen once, when it
 * is submitted, from the request and the team's settings. Everything downstream
 * reads the plan; nothing chooses again. */
typedef struct mlc_plan_input {
    int kind;          /* MLC_KIND_* */
    int dtype;
    int ntensors;
    int64_t total;     /* elements over all tensors */
    int in_place;      /* one tensor, reduced where it lies */
    int is_group;      /* a keyed group: tensors arrive after it is queued */
    int blocking;      /* the caller waits for it: it may run on the caller's thread */
    int nranks;
    int checked;       /* the agreement exchange runs before its data moves */
    int algorithm;     /* the team's: MLC_ALG_* */
    int nthreads;
    int64_t chunk_bytes, window_segments, latency_bytes, inline_bytes, direct_bytes;
    int compression;   /* the team's: MLC_COMPRESSION_* */
    int64_t rabenseifner_bytes; /* under MLC_ALG_AUTO: Rabenseifner below, the ring from */
    int op;            /* MLC_OP_*: min, max and product never ride the agreement exchange */
    int64_t submit_bytes; /* up to: a keyed group of one tensor is reduced by its submit */
} mlc_plan_input;
typedef struct mlc_plan {
    int algorithm;     /* row of the algorithm table (never MLC_ALG_AUTO); broadcasts: -1 */
    int direct;        /* its data travels, and is summed, inside the agreement exchange */
    int on_caller;     /* runs on the blocking caller's thread, not the team's */
    int nothing;       /* nothing to move (empty, or one rank in place, unchecked) */
    int lanes;         /* threads that share its segments: the team's, or 1 on the caller */
    int fused;         /* several tensors: segments are packed into fusion slots */
    int64_t seg_elems; /* segment length in elements */
    int64_t nseg;      /* allreduce: segments over all tensors */
    int64_t window;    /* slots segment g cycles through: g mod window */
    int aligned;       /* tensors of a segment or more start on segment boundaries */
    int compression;   /* what its messages carry: MLC_COMPRESSION_* (NONE: its own dtype) */
    int by_submit;     /* a keyed group of one small tensor: its submit reduces it then and
                        * there, as a blocking call on the submitting thread */
} mlc_plan;
void mlc_plan_make(const mlc_plan_input *in, mlc_plan *out);
/* The algorithm table (csrc/algos/registry.c): how many rows, and a row's name. */
int mlc_algorithm_count(void);
const char *mlc_algorithm_name(int algorithm);
/* Binomial tree broadcast rooted at root. */
int mlc_binomial_parent(int rank, int root, int size); /* -1 for the root */
int mlc_binomial_children(int rank, int root, int size, int *children, int max_children);

/* ---- the agreement check's messages (csrc/agree/exchange.c, signature.c, verdict*.c) ---- */
/* What the check's tree combines per message (a direct allreduce's input after it), and
 * one rank's whole signature: what the table after a disagreement sends to every rank. */
enum { MLC_AGREE_RECORD_BYTES = 48, MLC_SIGNATURE_BYTES = 312 };
