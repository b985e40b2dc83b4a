/* The agreement exchange: every rank learns that every rank submitted the same
 * request, with the same settings, before its data moves.
 *
 * Steps, per request, n ranks: the first thread of this rank that needs the
 * verdict (a team thread starting the request, or a blocking caller about to run
 * it) takes the exchange lock and, for each registered request up to its own, in
 * queue order (the others sleep until their verdict is out: never behind the lock,
 * whose holder may go on to a request the peers start only after theirs): waits
 * until the team layer has made it ready (a keyed group with
 * the finite check waits for its last tensor), signs it (signature.c) and makes
 * a fixed-size record of it: the signature's digest as both minimum and maximum,
 * its stop flag, its NaN/Inf scan (count of ranks, lowest rank and its first
 * tensor), whether its own check of its arguments failed and, for a direct
 * allreduce, its input. The records are combined by a
 * recursive-doubling allreduce (algos/allreduce_recursive_doubling.c's
 * schedule, p = the largest power of two <= n): ranks r >= p fold theirs into
 * r - p; log2(p) exchanges with r XOR 2^k, each combining both records (min,
 * max, OR, sums, lowest rank: each the same whichever side computes it); r - p
 * sends the result back. Every rank ends with the same record, bit for bit (the
 * payload's additions take the same two operands on both partners, and a + b
 * equals b + a in IEEE arithmetic). Equal minimum and maximum digests: every
 * rank signed the same request. Then, only when the digests differ or some rank
 * found NaN/Inf or bad arguments, every rank sends its full signature to every other (the old
 * all-to-all, O(n)) and judges the table, so the message names every rank and
 * setting. The same record and table everywhere give the same verdict
 * everywhere: every rank moves the request's data, or every rank fails it with
 * the same message and goes on, in step, with the next request. Requests are
 * exchanged one at a time in queue order on a communicator that carries nothing
 * else, and messages from one sender under one tag never overtake each other.
 *
 * Direct allreduce: when the plan says so, the record carries the whole input
 * and the exchange is also the reduction (summed along the tree, divided by n at
 * the end for an average). Nothing moves after it. The sizes of a collective of
 * rows travel the same way (sizes_count int64 slots, each rank filling its own):
 * every rank learns every rank's sizes in the check itself. An allgather's rows
 * follow its sizes while each rank's fit its share of the room (below): the
 * check then gathers them too, joined in rank order (bytes copied, never added).
 *
 * Messages per rank and request when the ranks agree: 2 ceil(log2 n) at most,
 * sends and receives (log2(p) of each, plus one of each for a rank in the fold);
 * mlc_agree_counts reports them. Bytes on the wire per message: the 48-byte
 * record, plus N for a direct allreduce of N bytes (for an allgather: 8 n for the
 * sizes, plus the rows of the ranks the record combines); per rank and request about
 * ceil(log2 n) (48 + N) bytes each way, where an all-to-all of the 264-byte
 * signature would send (n-1) (264 + N). The latency is
 * log2(p) message latencies (+2 with a fold), against one for the all-to-all:
 * at 2 ranks both are one exchange. After a disagreement: 2(n-1) more messages
 * of a signature each. Direct payloads are capped at MLC_DIRECT_MAX_BYTES at any
 * n (each rank sends its payload ceil(log2 n) times).
 *
 * A stalled exchange names the late ranks through arrival notices (arrivals.c),
 * sent only after a wait passes half the stall warning limit. ML_COMM_CHECK_LAYOUT=0
 * switches the exchange off (then a mismatch hangs or corrupts, as in MPI). A
 * single rank exchanges nothing; with the finite check it still judges its own
 * scan.
 *
 * Stopping together: mlc_agree_request_stop (a signal handler's path: one atomic
 * store) makes every later record of this rank carry a stop flag. The verdict on
 * the first request whose combined record holds one marks the request
 * (stop_asked) and the engine (stop_seq) alike on every rank, so all ranks learn
 * of it at the same request, without a message of its own. Without the exchange
 * (ML_COMM_CHECK_LAYOUT=0) nothing carries it: the Python layer refuses to stop
 * together then; one rank answers from its own flag. */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "agree.h"
#include "algos/algo.h"


/* What the tree combines: the same bits on every rank at the end. */
typedef struct record {
    uint64_t digest_min, digest_max;
    int32_t ranks;            /* how many ranks' records this one combines */
    int32_t stop;             /* some rank asked to stop */
    int32_t nonfinite_ranks;  /* ranks whose input holds NaN/Inf */
    int32_t nonfinite_rank;   /* the lowest of them (INT32_MAX: none) */
    int32_t nonfinite_tensor; /* its first such tensor */
    int32_t direct_ranks;     /* ranks whose input follows (summed) */
    int32_t bad_ranks;        /* ranks whose own check of their arguments failed */
    int32_t rows_ranks;       /* ranks whose rows follow the sizes (joined in rank order) */
} record;

_Static_assert(sizeof(record) % 8 == 0, "the payload after a record stays aligned");
_Static_assert(sizeof(record) == MLC_AGREE_RECORD_BYTES, "the record's size as ml_comm_internal.h says");

static char *payload(char *rec) { return rec + sizeof(record); }

static mlc_signature *slot(const mlc_agree *ag, int r) {
    return (mlc_signature *)(ag->slots + (size_t)r * mlc_signature_bytes());
}

/* ---- waiting, and what a stalled wait names ---- */

/* One request's wait in the exchange: its stall clock, and whether it told the
 * other ranks where it waits (arrivals.c). */
typedef struct waiting {
    mlc_agree *ag;
    mlc_agreement *a;
    int64_t round; /* the exchange's number on every rank (mlc_agree.rounds) */
    mlc_stall stall;
    int announced;
    mlc_wait wait; /* what the job's deadlock check hears of it (waits.c) */
} waiting;

static void describe_agreement(const void *arg, char *buf, size_t len) {
    mlc_describe_input(&((const mlc_agreement *)arg)->in, buf, len);
}

static void describe_inputs(const void *arg, char *buf, size_t len) {
    snprintf(buf, len, "this rank's own inputs of the request to be submitted");
}

static void announce(waiting *w) {
    mlc_tp *tp = &w->ag->tp;
    mlc_tp_set_progress(tp, NULL, NULL); /* no stall checks inside the stall's own messages */
    mlc_arrivals_announce(&w->ag->arrivals, tp, w->round);
    w->announced = 1;
}

/* The ranks from which no arrival notice came: those that have not reached it. */
static void describe_missing(const void *arg, char *buf, size_t len) {
    waiting *w = (waiting *)arg;
    mlc_tp *tp = &w->ag->tp;
    void *progress_arg = tp->progress_arg;
    mlc_tp_progress progress = tp->progress;
    if (!w->announced) { /* a first report before half the limit: give notices a moment */
        announce(w);
        double until = mlc_now() + 0.2;
        while (mlc_now() < until) sched_yield();
    }
    mlc_tp_set_progress(tp, NULL, NULL);
    mlc_arrivals_describe(&w->ag->arrivals, tp, w->round, buf, len);
    mlc_tp_set_progress(tp, progress, progress_arg);
}

/* "team 0 request 3 (average of ...)": a long wait, as the job's deadlock check names it
 * (written only then: every request's exchange would pay for the text). */
static void describe_long_wait(const void *arg, char *buf, size_t len) {
    const waiting *w = arg;
    char desc[MLC_WAIT_TEXT - 56]; /* room for "team T request S (...)" around it */
    mlc_describe_input(&w->a->in, desc, sizeof desc);
    snprintf(buf, len, "team %d request %lld (%s)", w->ag->dog.team_id, (long long)w->a->seq, desc);
}

/* Every poll of the exchange's waits: the stall watchdog, and the arrival notice
 * once the wait has lasted half the warning (or abort) limit. */
static void exchange_progress(void *arg, const mlc_tp *tp, int64_t poll) {
    waiting *w = arg;
    mlc_stall_poll(&w->stall);
    /* Not at the first poll: the job's deadlock check looks at waits of 64 polls or more. */
    if (w->ag->waits && w->stall.polls % 64 == 1 && w->stall.polls > 1) mlc_waits_poll(w->ag->waits, &w->wait);
    if (w->announced || w->stall.start == 0 || w->stall.polls % 64 != 1) return;
    const mlc_watchdog *d = w->stall.dog;
    double limit = d->warn > 0 ? d->warn : d->abort;
    if (limit > 0 && mlc_now() - w->stall.start >= limit / 2) {
        announce(w);
        mlc_tp_set_progress(&w->ag->tp, exchange_progress, w);
    }
}

static int failed(mlc_agree *ag, mlc_agreement *a, int rc) {
    snprintf(a->message, MLC_MSG_LEN, "%.480s (agreement check)", ag->tp_message);
    return rc;
}

/* Count the `posted` requests in ag->reqs and wait for them (rc: how their posting went).
 * After an error nothing stays posted. */
static int wait_posted(mlc_agree *ag, mlc_agreement *a, int posted, int rc) {
    a->messages += posted;
    if (rc == MLC_OK) rc = mlc_tp_waitall(&ag->tp, posted, ag->reqs);
    if (rc != MLC_OK) {
        mlc_tp_abandon(&ag->tp, posted, ag->reqs);
        return failed(ag, a, rc);
    }
    return MLC_OK;
}

/* Post the receive (src >= 0) and the send (dest >= 0), then wait for both. */
static int move(mlc_agree *ag, mlc_agreement *a, const void *out, int64_t out_bytes, int dest,
                void *in, int64_t in_bytes, int src, int tag) {
    mlc_tp *tp = &ag->tp;
    int rc = MLC_OK, posted = 0;
    if (src >= 0 && (rc = mlc_tp_irecv(tp, in, in_bytes, src, tag, &ag->reqs[posted])) == MLC_OK) posted++;
    if (rc == MLC_OK && dest >= 0 && (rc = mlc_tp_isend(tp, out, out_bytes, dest, tag, &ag->reqs[posted])) == MLC_OK)
        posted++;
    return wait_posted(ag, a, posted, rc);
}

/* ---- the tree ---- */

/* A direct allreduce's input, or the sizes a collective of rows carries here. */
static int64_t payload_bytes(const mlc_agreement *a) {
    if (a->in.sizes_count > 0) return a->in.sizes_count * (int64_t)sizeof(int64_t);
    return a->in.total * mlc_dtype_size(a->in.dtype);
}

/* ---- an allgather's rows, carried after its sizes ----
 * A record that combines ranks S holds the sizes of S (the others' slots zero) and,
 * while every rank of S sent its rows, those rows back to back in rank order: the
 * gathered output's layout, restricted to S. Two records join by interleaving their
 * ranks' rows in rank order, the same bytes whichever side joins them. A rank offers
 * its rows only within its share (1/n) of the direct payload's room beside the sizes;
 * the rows stop riding (rows_ranks 0) where some rank did not offer them, and every
 * length read from a record is checked against that room first. */

static int carries_rows(const mlc_agreement *a) { return a->in.direct && a->in.sizes_count > 0 && a->in.rows_out; }

static int64_t row_bytes(const mlc_agreement *a) { return a->in.row_elements * mlc_dtype_size(a->in.dtype); }

/* Room for rows after the sizes. */
static int64_t rows_room(const mlc_agree *ag, const mlc_agreement *a) { return ag->direct_bytes - payload_bytes(a); }

/* The rows' bytes of a record: its sizes times a row's bytes; -1 past the room. */
static int64_t rows_bytes_of(const mlc_agree *ag, const mlc_agreement *a, const char *rec) {
    const int64_t *sizes = (const int64_t *)payload((char *)rec), per_row = row_bytes(a), room = rows_room(ag, a);
    int64_t bytes = 0;
    for (int64_t r = 0; r < a->in.sizes_count; r++) {
        if (sizes[r] < 0 || (per_row > 0 && sizes[r] > (room - bytes) / per_row)) return -1;
        bytes += sizes[r] * per_row;
    }
    return bytes;
}

/* A record from a rank that submitted another request may say anything: its rows
 * ride only where their length checks out (the verdict then fails the request). */
static int rows_ride(const mlc_agree *ag, const mlc_agreement *a, const char *rec) {
    const record *r = (const record *)rec;
    return carries_rows(a) && r->direct_ranks == r->ranks && r->rows_ranks == r->ranks &&
           rows_bytes_of(ag, a, rec) >= 0;
}

/* A record's bytes on the wire: its payload only while every rank in it sent one,
 * its rows only while every rank in it sent them. */
static int64_t record_bytes(const mlc_agree *ag, const mlc_agreement *a, const char *rec) {
    const record *r = (const record *)rec;
    if (r->direct_ranks != r->ranks) return (int64_t)sizeof(record);
    return (int64_t)sizeof(record) + payload_bytes(a) + (rows_ride(ag, a, rec) ? rows_bytes_of(ag, a, rec) : 0);
}

/* x's rows joined with y's (both riding, disjoint ranks) into ag->joined, rank by
 * rank; the sizes are summed afterwards by the caller. 0: they no longer fit. */
static int join_rows(mlc_agree *ag, const mlc_agreement *a, const char *x, const char *y) {
    const int64_t bx = rows_bytes_of(ag, a, x), by = rows_bytes_of(ag, a, y);
    if (bx < 0 || by < 0 || bx + by > rows_room(ag, a)) return 0;
    const int64_t *sx = (const int64_t *)payload((char *)x), *sy = (const int64_t *)payload((char *)y);
    const char *from_x = payload((char *)x) + payload_bytes(a), *from_y = payload((char *)y) + payload_bytes(a);
    const int64_t per_row = row_bytes(a);
    char *to = ag->joined;
    for (int64_t r = 0; r < a->in.sizes_count; r++) {
        const int64_t nx = sx[r] * per_row, ny = sy[r] * per_row;
        memcpy(to, from_x, (size_t)nx);
        memcpy(to + nx, from_y, (size_t)ny);
        to += nx + ny;
        from_x += nx;
        from_y += ny;
    }
    return 1;
}

static void make_record(mlc_agree *ag, mlc_agreement *a) {
    const mlc_signature *s = slot(ag, ag->tp.rank);
    record *r = (record *)ag->mine;
    int tensor, count;
    mlc_signature_nonfinite(s, &tensor, &count);
    *r = (record){.ranks = 1, .stop = mlc_signature_stop(s), .nonfinite_rank = INT32_MAX,
                  .direct_ranks = a->in.direct != 0, .bad_ranks = mlc_signature_bad_args(s) != 0};
    r->digest_min = r->digest_max = mlc_signature_digest(s);
    if (tensor >= 0) {
        r->nonfinite_ranks = 1;
        r->nonfinite_rank = ag->tp.rank;
        r->nonfinite_tensor = tensor;
    }
    if (a->in.direct && a->in.sizes_count > 0) {
        memcpy(payload(ag->mine), a->in.sizes_in, (size_t)payload_bytes(a));
        /* Offered within a rank's share of the room only: then every rank's rows fit
         * together, and rows that would not are never sent to be dropped. */
        if (carries_rows(a) && a->in.rows_capacity >= ag->direct_bytes &&
            a->in.rows_bytes <= rows_room(ag, a) / ag->tp.size && rows_bytes_of(ag, a, ag->mine) == a->in.rows_bytes) {
            r->rows_ranks = 1;
            memcpy(payload(ag->mine) + payload_bytes(a), a->in.rows_in, (size_t)a->in.rows_bytes);
        }
    } else if (a->in.direct)
        mlc_gather_range(a->in.tensors, a->in.starts, a->in.ntensors, a->in.dtype, 0, a->in.total,
                         payload(ag->mine));
}

/* mine = mine (+) theirs; every field is symmetric in its two operands. */
static void combine(mlc_agree *ag, mlc_agreement *a, char *mine, const char *theirs) {
    record *x = (record *)mine;
    const record *y = (const record *)theirs;
    int rows_joined = 0;
    if (x->direct_ranks == x->ranks && y->direct_ranks == y->ranks && a->in.direct) {
        if (a->in.sizes_count > 0) {
            rows_joined = rows_ride(ag, a, mine) && rows_ride(ag, a, theirs) && join_rows(ag, a, mine, theirs);
            mlc_reduce_sum_into(payload(mine), theirs + sizeof(record), a->in.sizes_count, MLC_INT64);
            if (rows_joined)
                memcpy(payload(mine) + payload_bytes(a), ag->joined, (size_t)rows_bytes_of(ag, a, mine));
        } else
            mlc_reduce_sum_into(payload(mine), theirs + sizeof(record), a->in.total, a->in.dtype);
    }
    if (y->digest_min < x->digest_min) x->digest_min = y->digest_min;
    if (y->digest_max > x->digest_max) x->digest_max = y->digest_max;
    x->ranks += y->ranks;
    x->stop |= y->stop;
    x->nonfinite_ranks += y->nonfinite_ranks;
    if (y->nonfinite_rank < x->nonfinite_rank) {
        x->nonfinite_rank = y->nonfinite_rank;
        x->nonfinite_tensor = y->nonfinite_tensor;
    }
    x->direct_ranks += y->direct_ranks;
    x->bad_ranks += y->bad_ranks;
    x->rows_ranks = rows_joined ? x->rows_ranks + y->rows_ranks : 0;
}

static int tree(mlc_agree *ag, mlc_agreement *a) {
    const int r = ag->tp.rank, n = ag->tp.size, p2 = mlc_rd_pow2_floor(n);
    const int fold = mlc_rd_fold_partner(r, n);
    const int64_t room = (int64_t)sizeof(record) + ag->direct_bytes;
    int rc;
    if (r >= p2) { /* folded: hand the record over, take the result back */
        if ((rc = move(ag, a, ag->mine, record_bytes(ag, a, ag->mine), fold, NULL, 0, -1, MLC_AGREE_TREE_TAG)))
            return rc;
        if ((rc = move(ag, a, NULL, 0, -1, ag->theirs, room, fold, MLC_AGREE_TREE_TAG))) return rc;
        memcpy(ag->mine, ag->theirs, (size_t)record_bytes(ag, a, ag->theirs));
        return MLC_OK;
    }
    if (fold >= 0) {
        if ((rc = move(ag, a, NULL, 0, -1, ag->theirs, room, fold, MLC_AGREE_TREE_TAG))) return rc;
        combine(ag, a, ag->mine, ag->theirs);
    }
    for (int k = 0; k < mlc_rd_nsteps(n); k++) {
        int partner = mlc_rd_partner(r, n, k);
        if ((rc = move(ag, a, ag->mine, record_bytes(ag, a, ag->mine), partner, ag->theirs, room, partner,
                       MLC_AGREE_TREE_TAG)))
            return rc;
        combine(ag, a, ag->mine, ag->theirs);
    }
    if (fold >= 0) return move(ag, a, ag->mine, record_bytes(ag, a, ag->mine), fold, NULL, 0, -1, MLC_AGREE_TREE_TAG);
    return MLC_OK;
}

/* Every rank's signature to every rank (after a disagreement or NaN/Inf), in windows
 * of pairwise steps: at step s rank r sends to r+s and receives from r-s, so each
 * window's messages pair with the peers' same window and at most 2 MLC_TABLE_WINDOW
 * requests are outstanding at any rank count. */
static int table(mlc_agree *ag, mlc_agreement *a) {
    mlc_tp *tp = &ag->tp;
    const int n = tp->size, me = tp->rank;
    const int64_t bytes = (int64_t)mlc_signature_bytes();
    for (int first = 1; first < n; first += MLC_TABLE_WINDOW) {
        const int last = first + MLC_TABLE_WINDOW < n ? first + MLC_TABLE_WINDOW : n;
        int rc = MLC_OK, posted = 0;
        for (int step = first; step < last && rc == MLC_OK; step++) {
            const int from = mlc_pairwise_recv_peer(me, n, step), to = mlc_pairwise_send_peer(me, n, step);
            rc = mlc_tp_irecv(tp, slot(ag, from), bytes, from, MLC_AGREE_TABLE_TAG, &ag->reqs[posted]);
            posted += rc == MLC_OK;
            if (rc == MLC_OK) rc = mlc_tp_isend(tp, slot(ag, me), bytes, to, MLC_AGREE_TABLE_TAG, &ag->reqs[posted]);
            posted += rc == MLC_OK;
        }
        if ((rc = wait_posted(ag, a, posted, rc)) != MLC_OK) return rc;
    }
    return MLC_OK;
}

/* After a disagreement: the first round sent ahead of this check (algos/ring_ahead.c)
 * is completed on every rank, what came from r-1 dropped, so nothing stays in flight
 * when every rank fails the request. The neighbours' signatures say what they sent. */
static void settle_ahead(mlc_agree *ag, mlc_agreement *a) {
    const int n = ag->tp.size, r = ag->tp.rank;
    if (!ag->ahead_tp.ops) return;
    mlc_ring_ahead scratch = {.buf = ag->ahead_scratch}; /* nothing of this rank posted */
    mlc_ring_ahead *ahead = a->in.ahead ? a->in.ahead : &scratch;
    ahead->expected = mlc_signature_ahead(slot(ag, (r + n - 1) % n));
    ahead->right_sent = mlc_signature_ahead(slot(ag, (r + 1) % n));
    a->left_ahead = ahead->expected;
    /* Watched like every other wait: a neighbour that never completes its side is named. */
    mlc_stall stall;
    mlc_stall_begin(&stall, &ag->dog, a->seq, describe_agreement, a, NULL, NULL);
    mlc_tp_set_progress(&ag->ahead_tp, mlc_stall_transport_progress, &stall);
    mlc_ring_ahead_complete(&ag->ahead_tp, ahead);
    mlc_tp_set_progress(&ag->ahead_tp, NULL, NULL);
}

/* The tree, then the table when the record says the ranks differ; the verdict. */
static int exchange(mlc_agree *ag, mlc_agreement *a) {
    waiting w = {ag, a, ag->rounds, {0}, 0, {NULL, 0, 0, describe_long_wait, NULL, ""}};
    w.wait.arg = &w;
    mlc_stall_begin(&w.stall, &ag->dog, a->seq, describe_agreement, a, describe_missing, &w);
    mlc_tp_set_progress(&ag->tp, exchange_progress, &w);
    make_record(ag, a);
    int rc = ag->tp.size > 1 ? tree(ag, a) : MLC_OK;
    const record *r = (const record *)ag->mine;
    if (rc == MLC_OK && (r->digest_min != r->digest_max || r->nonfinite_ranks > 0 || r->bad_ranks > 0)) {
        rc = ag->tp.size > 1 ? table(ag, a) : MLC_OK;
        /* Only a complete table says what the neighbours sent ahead; after a failed one the
         * team layer cancels what this rank posted (left_ahead stays -1). */
        if (rc == MLC_OK && (rc = mlc_judge(ag->slots, mlc_signature_bytes(), ag->tp.size, ag->tp.rank, ag->dog.team_id, a)) &&
            ag->tp.size > 1)
            settle_ahead(ag, a);
    }
    mlc_tp_set_progress(&ag->tp, NULL, NULL);
    mlc_waits_leave(ag->waits, &w.wait);
    if (rc != MLC_OK) return rc;
    a->stop_asked = r->stop != 0;
    int64_t none = -1;
    if (a->stop_asked) atomic_compare_exchange_strong(&ag->stop_seq, &none, a->seq);
    if (a->in.direct && r->direct_ranks == r->ranks && a->in.sizes_count > 0) { /* every rank's sizes */
        memcpy(a->in.sizes_out, payload(ag->mine), (size_t)payload_bytes(a));
        a->done_by_exchange = 1;
        if (rows_ride(ag, a, ag->mine) && r->ranks == ag->tp.size) { /* and every rank's rows */
            memcpy(a->in.rows_out, payload(ag->mine) + payload_bytes(a), (size_t)rows_bytes_of(ag, a, ag->mine));
            a->rows_carried = 1;
        }
    } else if (a->in.direct && r->direct_ranks == r->ranks) { /* the reduction is done: put it in place */
        char *sum = payload(ag->mine);
        if (a->in.op == MLC_OP_AVERAGE) mlc_divide_by_ranks(sum, a->in.total, a->in.dtype, ag->tp.size);
        mlc_scatter_range(a->in.tensors, a->in.starts, a->in.ntensors, a->in.dtype, 0, a->in.total, sum);
        a->done_by_exchange = 1;
    }
    return MLC_OK;
}

/* Wait until the team layer made a ready; MLC_ERR_STATE on shutdown. */
static int wait_ready(mlc_agree *ag, mlc_agreement *a) {
    if (atomic_load_explicit(&a->ready, memory_order_acquire)) return MLC_OK;
    mlc_stall stall;
    mlc_stall_begin(&stall, &ag->dog, a->seq, describe_agreement, a, describe_inputs, NULL);
    pthread_mutex_lock(&ag->list_lock);
    while (!atomic_load_explicit(&a->ready, memory_order_acquire) && !ag->shutting_down)
        mlc_stall_cond_wait(&stall, &ag->ready_cv, &ag->list_lock);
    int ready = atomic_load_explicit(&a->ready, memory_order_acquire);
    pthread_mutex_unlock(&ag->list_lock);
    return ready ? MLC_OK : MLC_ERR_STATE;
}

/* A check retried because this rank's call was ahead of others': the table's round
 * completed what it had sent ahead (its neighbour dropped it), so it goes ahead again,
 * as its signature says, for the others' next request. */
static void send_ahead_again(mlc_agree *ag, mlc_agreement *a) {
    if (a->left_ahead < 0 || !a->in.ahead || a->in.ahead_bytes <= 0) return;
    if (mlc_ring_ahead_post(&ag->ahead_tp, a->in.ahead, a->in.ahead_own, a->in.ahead_bytes) != MLC_OK)
        a->in.ahead_bytes = 0; /* nothing went: its next signature says so */
}

/* Exchange and judge one request (or fail it as the rest of a failed call), then
 * publish the verdict. Called with the exchange lock held, in queue order. */
static void check_one(mlc_agree *ag, mlc_agreement *a) {
    int status;
    a->message[0] = '\0';
    a->messages = 0;
    a->rows_carried = 0;
    a->left_ahead = -1;
    if ((status = wait_ready(ag, a)) != MLC_OK) {
        snprintf(a->message, MLC_MSG_LEN, "the team was shut down before this rank's inputs arrived");
    } else if (ag->drop_left > 0 && a->in.part > 0) {
        /* Every rank drops the same parts: what is left of the failed call on this rank. */
        ag->drop_left--;
        status = ag->drop_status;
        snprintf(a->message, MLC_MSG_LEN, "%s", ag->drop_message);
    } else {
        ag->drop_left = 0;
        if (!a->in.direct || payload_bytes(a) > ag->direct_bytes) {
            a->in.direct = 0; /* the threshold shrank since the plan was made */
            a->in.sizes_count = 0;
        }
        for (;;) {
            mlc_sign(&a->in, atomic_load(&ag->stop_requested), slot(ag, ag->tp.rank));
            status = exchange(ag, a);
            ag->rounds++;
            atomic_fetch_add(&ag->checks, 1);
            if (status != MLC_AGREE_RETRY) break;
            send_ahead_again(ag, a);
            a->left_ahead = -1;
        }
        atomic_fetch_add(&ag->messages, a->messages);
        if (status != MLC_OK && a->in.nparts > 1 && a->in.part + 1 < a->in.nparts) {
            ag->drop_left = a->in.nparts - a->in.part - 1;
            ag->drop_status = status;
            snprintf(ag->drop_message, MLC_MSG_LEN, "%s", a->message);
        }
    }
    a->status = status;
    atomic_store_explicit(&a->state, MLC_CHECK_DONE, memory_order_release);
}

int mlc_agree_verdict(mlc_agree *ag, mlc_agreement *a, char *message) {
    if (atomic_load_explicit(&a->state, memory_order_acquire) == MLC_CHECK_NONE) return MLC_OK;
    pthread_mutex_lock(&ag->list_lock);
    while (atomic_load_explicit(&a->state, memory_order_acquire) != MLC_CHECK_DONE) {
        if (ag->exchanging) {
            /* Another thread exchanges, maybe this very request: sleep until a verdict is
             * out. Never behind the exchange lock: that thread goes on to later requests,
             * whose peers may wait for this one's data first. */
            pthread_cond_wait(&ag->verdict_cv, &ag->list_lock);
            continue;
        }
        ag->exchanging = 1;
        pthread_mutex_unlock(&ag->list_lock);
        pthread_mutex_lock(&ag->exchange_lock);
        while (atomic_load_explicit(&a->state, memory_order_acquire) != MLC_CHECK_DONE) {
            pthread_mutex_lock(&ag->list_lock);
            mlc_agreement *next = ag->head; /* never NULL here: a itself is still queued */
            ag->head = next->next;
            if (!ag->head) ag->tail = NULL;
            pthread_mutex_unlock(&ag->list_lock);
            check_one(ag, next);
            pthread_mutex_lock(&ag->list_lock);
            pthread_cond_broadcast(&ag->verdict_cv);
            pthread_mutex_unlock(&ag->list_lock);
        }
        pthread_mutex_unlock(&ag->exchange_lock);
        pthread_mutex_lock(&ag->list_lock);
        ag->exchanging = 0;
        pthread_cond_broadcast(&ag->verdict_cv); /* a waiter whose request is later takes over */
    }
    pthread_mutex_unlock(&ag->list_lock);
    if (a->status != MLC_OK && message) snprintf(message, MLC_MSG_LEN, "%s", a->message);
    return a->status;
}
