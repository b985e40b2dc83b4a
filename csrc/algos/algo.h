/* Algorithms: one file each, behind one interface, listed in one table
 * (registry.c). An algorithm sees a transport endpoint and the batch of
 * segments it is given; it knows nothing of teams, requests or plans. */
#ifndef MLC_ALGO_H
#define MLC_ALGO_H

#include "transport/transport.h"

/* A contiguous piece of one reduction: the result goes to data; the input is read
 * from input when it is not NULL (out of place: a large tensor reduced straight
 * from the caller's input into its output, with no copy), else from data. */
typedef struct mlc_segment {
    char *data;
    const char *input;
    int64_t count;
    int tag; /* of its messages: the segment's number modulo MLC_TAG_SPACE */
} mlc_segment;

/* Tags are segment numbers modulo this; the tag above it carries a ring's first piece
 * sent ahead (mlc_ring_ahead), below the MPI standard's smallest MPI_TAG_UB (32767). */
#define MLC_TAG_SPACE 32766
#define MLC_AHEAD_TAG MLC_TAG_SPACE
/* Segments a thread keeps in flight in one call (see allreduce_ring.c). */
#define MLC_RING_BATCH 2

/* One allreduce call: a batch of segments, every rank the same. */
typedef struct mlc_algo_call {
    int dtype, elem_size, op;
    const mlc_segment *segs;
    int nseg;
    char *scratch; /* receive staging of the calling thread */
    int64_t scratch_bytes;
    /* MLC_COMPRESSION_*: a float32 sum's messages carry 16-bit values (the ring and
     * Rabenseifner; the plan gives it to no other algorithm). Last, so that calls
     * written without it mean NONE. */
    int compression;
} mlc_algo_call;

typedef int (*mlc_allreduce_fn)(mlc_tp *tp, const mlc_algo_call *call);

/* Memory an algorithm may grow and keep across calls (its owner frees data). */
typedef struct mlc_buffer {
    char *data;
    int64_t bytes;
} mlc_buffer;

/* A ring's first round, posted before the agreement check so that it overlaps the
 * check (team/ahead.c says when): the rank's first send piece, from its own rows, to
 * rank r+1, and a receive of at most MLC_RING_PIECE_BYTES from rank r-1 into buf, on
 * MLC_AHEAD_TAG. A rank sends ahead exactly mlc_ring_ahead_bytes(its own first block's
 * bytes), which every rank can work out for its neighbours once the check agreed on the
 * sizes (or, after a disagreement, read in their signatures).
 *
 * Every message on MLC_AHEAD_TAG meets exactly one receive, check after check, so no
 * receive is ever cancelled (a cancelled one could race a piece of the next check):
 * between ranks r-1 and r, one message travels per check where either of them sent
 * ahead, r-1's piece or, when r-1 sent nothing, an empty one; r receives it. */
typedef struct mlc_ring_ahead {
    mlc_tp_req send, recv;
    int send_posted, recv_posted; /* posted and not yet complete */
    int64_t sent;                 /* bytes sent ahead to r+1 (0: none) */
    /* Known after the check: */
    int64_t expected;   /* bytes r-1 sent ahead: what recv receives (0: none) */
    int64_t right_sent; /* bytes r+1 sent ahead (> 0: it waits for a message from this rank) */
    char *buf;          /* MLC_RING_PIECE_BYTES */
} mlc_ring_ahead;

/* One collective of rows (allgather, reduce-scatter, alltoall): whole buffers of
 * rows of row_elements elements, the number of rows per peer in rows arrays of
 * size entries. */
typedef struct mlc_rows_call {
    int dtype, elem_size, op;
    int64_t row_elements;
    const char *input;
    char *output;
    /* allgatherv: recv_rows[r], rank r's rows (its own included), send_rows unused;
     * reduce-scatterv: recv_rows[r], the rows of the input that end on rank r;
     * alltoallv: send_rows[d] to rank d, recv_rows[s] from rank s. */
    const int64_t *send_rows, *recv_rows;
    int tag;
    /* Staging kept from call to call (a fresh block per call would fault in every
     * page); NULL: allocated for the call. */
    mlc_buffer *staging;
    /* The rings (allgatherv, reduce-scatterv): their first round, already posted; NULL:
     * none. The ring completes it (or cancels a receive nobody sends to). */
    mlc_ring_ahead *ahead;
} mlc_rows_call;

typedef int (*mlc_rows_fn)(mlc_tp *tp, const mlc_rows_call *call);

/* A row of the table: the algorithm's id (MLC_ALG_*), name and entry point (an
 * allreduce, or a collective of rows). */
typedef struct mlc_algo {
    int id;
    const char *name;
    mlc_allreduce_fn allreduce;
    mlc_rows_fn rows;
} mlc_algo;

const mlc_algo *mlc_algo_find(int id); /* NULL: no such row */

int mlc_allreduce_ring(mlc_tp *tp, const mlc_algo_call *call);
int mlc_allreduce_recursive_doubling(mlc_tp *tp, const mlc_algo_call *call);
int mlc_allreduce_direct(mlc_tp *tp, const mlc_algo_call *call);
int mlc_allreduce_rabenseifner(mlc_tp *tp, const mlc_algo_call *call);
/* The ring's two halves (reduce_scatter_ring.c, allgather_ring.c). */
int mlc_reduce_scatter_ring(mlc_tp *tp, const mlc_algo_call *call);
int mlc_allgather_ring(mlc_tp *tp, const mlc_algo_call *call);
/* The direct allreduce's sum: the n ranks' inputs, in rank order (allreduce_direct.c). */
void mlc_direct_sum(void *out, const char *const *inputs, int n, int64_t count, int dtype, int op);

/* Collectives of rows, one file each. The rings cut blocks into pieces of at most this
 * many bytes (a multiple of every element size), forwarded as they arrive; a test
 * build shrinks it so that small blocks are cut too. */
#ifndef MLC_RING_PIECE_BYTES
#define MLC_RING_PIECE_BYTES (256 * 1024)
#endif
#if MLC_RING_PIECE_BYTES % 8 != 0
#error "MLC_RING_PIECE_BYTES must hold whole elements of every dtype"
#endif
/* A first piece is sent ahead only from a block of at least this many bytes: below it
 * the check is not worth a posted receive, and rows that ride the check itself (at most
 * MLC_DIRECT_MAX_BYTES in all) never also go ahead. */
#define MLC_AHEAD_MIN_BYTES (64 * 1024)
/* The bytes a rank sends ahead when its own first block has block_bytes: its first
 * piece, or 0. */
static inline int64_t mlc_ring_ahead_bytes(int64_t block_bytes) {
    if (block_bytes < MLC_AHEAD_MIN_BYTES) return 0;
    return block_bytes < MLC_RING_PIECE_BYTES ? block_bytes : MLC_RING_PIECE_BYTES;
}
/* Post a ring's first round ahead on a, whose buf is set: the send of sent bytes of
 * own and the receive; with sent 0, nothing (a's state cleared). */
int mlc_ring_ahead_post(mlc_tp *tp, mlc_ring_ahead *a, const char *own, int64_t sent);
/* After the check, with expected and right_sent known: the empty message r+1 waits for
 * (when this rank sent nothing ahead), the receive from r-1 (when either sent ahead),
 * all completed. After an error nothing stays posted. */
int mlc_ring_ahead_complete(mlc_tp *tp, mlc_ring_ahead *a);
/* Give up what is posted (a failed transport, a team shutting down). */
void mlc_ring_ahead_abandon(mlc_tp *tp, mlc_ring_ahead *a);

int mlc_allgatherv_ring(mlc_tp *tp, const mlc_rows_call *call);
int mlc_reduce_scatterv_ring(mlc_tp *tp, const mlc_rows_call *call);
int mlc_alltoallv_pairwise(mlc_tp *tp, const mlc_rows_call *call);
/* Sum of rows[0..k) (the rows before peer k). */
int64_t mlc_rows_before(const int64_t *rows, int k);

/* Algorithms that work in place start with this: an out-of-place segment's input
 * copied to its output. */
void mlc_segment_copy_input(const mlc_segment *seg, int elem_size);

/* Broadcast of one segment from root (broadcast_binomial.c). */
int mlc_broadcast_binomial(mlc_tp *tp, char *buf, int64_t bytes, int root, int tag);

#endif
