/* Agreement check: before a request moves any data, every rank learns what every
 * other rank submitted, and all ranks reach the same verdict.
 *
 * Steps, per request, n ranks: the first thread of this rank that needs the
 * verdict (a team thread starting the request, or a blocking caller about to run
 * it inline) takes the guard lock and, for each registered request up to its own,
 * in queue order: scans the input for NaN/Inf (only with the finite check on),
 * posts a receive from each of the n-1 peers, sends its signature (below) to each
 * of them, and waits for all 2(n-1) messages, on a communicator that carries
 * nothing else, under one tag. Every rank exchanges its requests one at a time in
 * the same order and MPI never lets one sender's messages overtake each other, so
 * the k-th signature from a peer belongs to its k-th request. Each rank then
 * compares the n signatures; the same table gives the same verdict everywhere, so
 * either every rank moves the request's data or every rank fails it with the same
 * message and goes on, in step, with the next request.
 *
 * Direct allreduce: a small allreduce (at most direct_bytes, under MLC_ALG_AUTO)
 * sends its whole input along with its signature, so that the exchange is also
 * the reduction: each rank adds the n inputs in rank order (rank 0's first), the
 * same order on every rank, so every rank holds the same bits. One message latency
 * in all, where recursive doubling takes log2(n) (plus 2 for a fold).
 *
 * Bytes on the wire per rank and request: (n-1) * 112 (the signature) sent and as
 * many received, all at once: one message latency before the data moves; for a
 * direct allreduce of N bytes, (n-1) * (112 + N) each way and nothing after.
 * Sending to every peer (not along a tree) is what lets a waiting rank name
 * exactly the ranks that have not reached the request (the stall watchdog prints
 * them). ML_COMM_CHECK_LAYOUT=0 switches the exchange off (then a mismatch hangs
 * or corrupts, as in MPI). A single rank exchanges nothing; with the finite check
 * it still scans its input.
 *
 * Stopping together: mlc_team_request_stop (a signal handler's path: one atomic
 * store) makes every later signature of this rank carry a stop flag. The verdict
 * of the first request whose table holds one marks the request (stop_asked) and
 * the team (stop_seq) alike on every rank, so all ranks learn of the request at
 * the same request, without a message of its own. Without the exchange
 * (ML_COMM_CHECK_LAYOUT=0, or one rank) nothing carries it: the Python layer
 * refuses to stop together then, or (one rank) answers from its own flag.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "team.h"

#define MLC_SIG_TAG 0
#define MLC_SIG_SHOWN_COUNTS 4
/* Payload room over all ranks of one exchange: caps direct_bytes at n ranks to this
 * over n, so that a rank never sends more than this per direct allreduce. */
#define MLC_DIRECT_TABLE_BYTES (128 * 1024)

/* What one rank submitted for one request. Compared: kind, dtype, op (allreduce),
 * root (broadcast), ntensors, total, layout_hash, part, nparts, call_dtypes. The
 * rest is for messages, the direct allreduce and the stop flag. Sent as bytes: the
 * ranks of one job share one architecture. */
typedef struct mlc_signature {
    int32_t kind, dtype, op, root;
    int32_t ntensors, part, nparts, is_group;
    int64_t total;
    uint64_t layout_hash; /* FNV-1a over every tensor's count */
    int64_t seq, key;
    int64_t counts[MLC_SIG_SHOWN_COUNTS]; /* the first tensors' counts */
    int32_t nonfinite_tensor;             /* first tensor holding NaN/Inf; -1: none (or unchecked) */
    int32_t nonfinite_count;              /* how many tensors hold NaN/Inf */
    int32_t direct;                       /* the input (total elements) follows */
    uint16_t call_dtypes;                 /* bit d: the caller's call has a part of dtype d */
    uint16_t stop;                        /* this rank asked to stop (mlc_team_request_stop) */
} mlc_signature;

_Static_assert(sizeof(mlc_signature) == 112, "the file comment gives the signature's size");

/* Rank r's slot of the exchange: its signature, then (direct) its input. */
static mlc_signature *sig(const mlc_guard *g, int r) {
    return (mlc_signature *)(g->slots + (size_t)r * g->slot_bytes);
}

static char *payload(const mlc_guard *g, int r) { return (char *)(sig(g, r) + 1); }

/* Append to buf (holding *off bytes) what fits; the text ends "..." when cut. */
static void append(char *buf, size_t len, size_t *off, const char *fmt, ...) {
    if (*off + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *off, len - *off, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    if (*off + (size_t)w >= len) {
        *off = len - 1;
        if (len > 4) memcpy(buf + len - 4, "...", 4);
        return;
    }
    *off += (size_t)w;
}

/* ---- settings and life cycle ---- */

void mlc_guard_init(mlc_team *team) {
    mlc_guard *g = &team->guard;
    g->layout = 1;
    g->stall_warn = MLC_DEFAULT_STALL_WARN_SECONDS;
    g->comm = MPI_COMM_NULL;
    atomic_init(&g->stop_requested, 0);
    atomic_init(&g->stop_seq, -1);
    pthread_mutex_init(&g->lock, NULL);
}

int mlc_team_request_stop(mlc_team *team) {
    if (!team) return MLC_ERR_ARG;
    atomic_store(&team->guard.stop_requested, 1); /* async-signal-safe: a handler may call it */
    return MLC_OK;
}

int64_t mlc_team_stop_seq(const mlc_team *team) {
    return team ? atomic_load(&((mlc_team *)team)->guard.stop_seq) : -1;
}

int mlc_request_stop_asked(const mlc_request *req) { return req ? req->stop_asked : 0; }

/* Slots for direct allreduces of up to `bytes` (less at large n). */
static int size_slots(mlc_team *team, int64_t bytes) {
    mlc_guard *g = &team->guard;
    const int n = team->ctx->size;
    const int64_t cap = MLC_DIRECT_TABLE_BYTES / n;
    bytes = (bytes < cap ? bytes : cap) / 8 * 8; /* slots stay 8-byte aligned */
    size_t slot = sizeof(mlc_signature) + (size_t)bytes;
    char *slots = realloc(g->slots, slot * n);
    if (!slots) return MLC_ERR_NOMEM;
    g->slots = slots;
    char *acc = realloc(g->acc, bytes > 0 ? bytes : 8);
    if (!acc) return MLC_ERR_NOMEM;
    g->acc = acc;
    g->slot_bytes = slot;
    g->direct_bytes = bytes;
    return MLC_OK;
}

int mlc_team_set_direct_threshold(mlc_team *team, int64_t bytes) {
    if (!team || bytes < 0) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->guard.lock);
    int rc = size_slots(team, bytes);
    pthread_mutex_unlock(&team->guard.lock);
    return rc;
}

int mlc_guard_open(mlc_team *team, char *err, size_t errlen) {
    mlc_guard *g = &team->guard;
    const int n = team->ctx->size;
    g->reqs = calloc(2 * (size_t)n, sizeof *g->reqs);
    if (!g->reqs || size_slots(team, MLC_DEFAULT_DIRECT_BYTES) != MLC_OK) {
        if (err && errlen) snprintf(err, errlen, "out of memory allocating the team's check buffers");
        return MLC_ERR_NOMEM;
    }
    int rc = MPI_Comm_dup(team->ctx->comm, &g->comm);
    if (rc != MPI_SUCCESS) {
        char msg[MLC_MSG_LEN];
        mlc_mpi_error(msg, rc, "MPI_Comm_dup");
        if (err && errlen) snprintf(err, errlen, "%s", msg);
        g->comm = MPI_COMM_NULL;
        return MLC_ERR_MPI;
    }
    return MLC_OK;
}

void mlc_guard_destroy(mlc_team *team) {
    mlc_guard *g = &team->guard;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (g->comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&g->comm);
    free(g->slots);
    free(g->acc);
    free(g->reqs);
    g->slots = g->acc = NULL;
    g->reqs = NULL;
    pthread_mutex_destroy(&g->lock);
}

int mlc_team_set_checks(mlc_team *team, int layout, int finite) {
    if (!team) return MLC_ERR_ARG;
    team->guard.layout = layout != 0;
    team->guard.finite = finite != 0;
    return MLC_OK;
}

int mlc_team_set_id(mlc_team *team, int id) {
    if (!team || id < 0) return MLC_ERR_ARG;
    team->guard.id = id;
    return MLC_OK;
}

int mlc_guard_wants(const mlc_team *team, const mlc_request *req) {
    const mlc_guard *g = &team->guard;
    if (team->ctx->size > 1) return g->layout || g->finite;
    return g->finite && req->kind == MLC_KIND_ALLREDUCE && mlc_dtype_is_float(req->dtype);
}

void mlc_guard_register(mlc_team *team, mlc_request *req) {
    mlc_guard *g = &team->guard;
    /* Read here, on the submitting thread, like the request's other settings. */
    req->direct_ok = team->algorithm == MLC_ALG_AUTO && req->kind == MLC_KIND_ALLREDUCE && !req->is_group;
    req->next_check = NULL;
    atomic_store_explicit(&req->check_state, MLC_CHECK_PENDING, memory_order_relaxed);
    if (g->tail) g->tail->next_check = req;
    else g->head = req;
    g->tail = req;
}

int mlc_request_nonfinite(const mlc_request *req, int *rank, int *tensor) {
    if (rank) *rank = req->nonfinite_ranks ? req->nonfinite_rank : -1;
    if (tensor) *tensor = req->nonfinite_ranks ? req->nonfinite_tensor : -1;
    return req->nonfinite_ranks;
}

/* ---- this rank's signature ---- */

static void sign(mlc_team *team, mlc_request *req, mlc_signature *s) {
    memset(s, 0, sizeof *s);
    s->kind = req->kind;
    s->dtype = req->dtype;
    s->op = req->kind == MLC_KIND_ALLREDUCE ? req->op : 0;
    s->root = req->kind == MLC_KIND_BROADCAST ? req->root : 0;
    s->ntensors = req->ntensors;
    s->part = req->part;
    s->nparts = req->nparts > 0 ? req->nparts : 1;
    s->is_group = req->is_group;
    s->call_dtypes = (uint16_t)req->call_dtypes;
    s->stop = (uint16_t)atomic_load(&team->guard.stop_requested);
    s->total = req->total;
    s->seq = (int64_t)req->seq;
    s->key = req->key;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < req->ntensors; i++) {
        uint64_t c = (uint64_t)req->tensors[i].count;
        for (int b = 0; b < 8; b++, c >>= 8) h = (h ^ (c & 0xff)) * 1099511628211ull;
        if (i < MLC_SIG_SHOWN_COUNTS) s->counts[i] = req->tensors[i].count;
    }
    s->layout_hash = h;
    s->nonfinite_tensor = -1;
    /* Not a group: its tensors arrive after it is queued; the others' are there now. */
    s->direct = req->direct_ok && req->total * mlc_dtype_size(req->dtype) <= team->guard.direct_bytes;
    if (s->direct) mlc_copy_range(req, 0, req->total, (char *)(s + 1), 1);
    if (!team->guard.finite || req->kind != MLC_KIND_ALLREDUCE || !mlc_dtype_is_float(req->dtype))
        return;
    /* A keyed group's scan (and so its exchange, and its data) waits for all its tensors. */
    if (req->is_group && mlc_group_wait_all(req) != MLC_OK) return;
    for (int i = 0; i < req->ntensors; i++) {
        const mlc_tensor *t = &req->tensors[i];
        const void *input = t->source ? t->source : t->data;
        if (t->count > 0 && mlc_has_nonfinite(input, t->count, req->dtype)) {
            if (s->nonfinite_tensor < 0) s->nonfinite_tensor = i;
            s->nonfinite_count++;
        }
    }
}

/* ---- the exchange ---- */

typedef struct {
    mlc_team *team;
    int npeers;
} missing_arg;

/* The peers whose signature has not arrived: those that have not reached the request. */
static void describe_missing(const void *arg, char *buf, size_t len) {
    const missing_arg *m = arg;
    const mlc_guard *g = &m->team->guard;
    const int me = m->team->ctx->rank;
    char ranks[MLC_MSG_LEN] = "";
    size_t off = 0;
    int nmissing = 0;
    for (int k = 0; k < m->npeers; k++) {
        int flag = 1;
        MPI_Request_get_status(g->reqs[k], &flag, MPI_STATUS_IGNORE);
        if (flag) continue;
        append(ranks, sizeof ranks, &off, "%s%d", nmissing++ ? ", " : "", k < me ? k : k + 1);
    }
    snprintf(buf, len, "%s %s to reach it", nmissing == 1 ? "rank" : "ranks", nmissing ? ranks : "?");
}

static int exchange(mlc_team *team, mlc_request *req, char *message) {
    mlc_guard *g = &team->guard;
    const int n = team->ctx->size, me = team->ctx->rank;
    const int npeers = n - 1;
    const mlc_signature *mine = sig(g, me);
    const int bytes = (int)sizeof *mine + (mine->direct ? (int)(req->total * mlc_dtype_size(req->dtype)) : 0);
    int rc, done = 0;
    for (int k = 0; k < npeers; k++) {
        int peer = k < me ? k : k + 1;
        rc = MPI_Irecv(sig(g, peer), (int)g->slot_bytes, MPI_BYTE, peer, MLC_SIG_TAG, g->comm, &g->reqs[k]);
        if (rc != MPI_SUCCESS) return mlc_mpi_error(message, rc, "MPI_Irecv (layout check)");
    }
    for (int k = 0; k < npeers; k++) {
        int peer = k < me ? k : k + 1;
        rc = MPI_Isend(mine, bytes, MPI_BYTE, peer, MLC_SIG_TAG, g->comm, &g->reqs[npeers + k]);
        if (rc != MPI_SUCCESS) return mlc_mpi_error(message, rc, "MPI_Isend (layout check)");
    }
    mlc_stall stall = {0};
    const missing_arg arg = {team, npeers};
    for (;;) {
        rc = MPI_Testall(2 * npeers, g->reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mlc_mpi_error(message, rc, "MPI_Testall (layout check)");
        if (done) return MLC_OK;
        mlc_stall_poll(&stall, team, req, describe_missing, &arg);
        sched_yield();
    }
}

/* ---- the verdict ---- */

static int same(const mlc_signature *a, const mlc_signature *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->ntensors == b->ntensors && a->total == b->total && a->layout_hash == b->layout_hash &&
           a->part == b->part && a->nparts == b->nparts && a->call_dtypes == b->call_dtypes;
}

/* "rank 1" or "ranks 0, 2-4": the ranks whose signature equals the leader's. */
static void append_ranks(char *buf, size_t len, size_t *off, const mlc_guard *g, int n, int leader) {
    const mlc_signature *l = sig(g, leader);
    int count = 0;
    for (int r = leader; r < n; r++) count += same(l, sig(g, r));
    append(buf, len, off, "%s ", count == 1 ? "rank" : "ranks");
    int first = 1;
    for (int r = leader; r < n;) {
        if (!same(l, sig(g, r))) {
            r++;
            continue;
        }
        int end = r;
        while (end + 1 < n && same(l, sig(g, end + 1))) end++;
        if (end == r) append(buf, len, off, "%s%d", first ? "" : ", ", r);
        else append(buf, len, off, "%s%d-%d", first ? "" : ", ", r, end);
        first = 0;
        r = end + 1;
    }
}

static void append_signature(char *buf, size_t len, size_t *off, const mlc_signature *s,
                             int show_counts) {
    append(buf, len, off, "%d tensor%s, %lld %s elements", s->ntensors, s->ntensors == 1 ? "" : "s",
           (long long)s->total, mlc_dtype_name(s->dtype));
    if (show_counts && s->ntensors > 0) {
        append(buf, len, off, " of sizes");
        for (int i = 0; i < s->ntensors && i < MLC_SIG_SHOWN_COUNTS; i++)
            append(buf, len, off, "%s %lld", i ? "," : "", (long long)s->counts[i]);
        if (s->ntensors > MLC_SIG_SHOWN_COUNTS) append(buf, len, off, ", ...");
    }
    if (s->kind == MLC_KIND_BROADCAST) append(buf, len, off, " (broadcast from rank %d", s->root);
    else append(buf, len, off, " (%s", s->op == MLC_OP_SUM ? "sum" : "average");
    if (s->nparts > 1) append(buf, len, off, ", part %d of %d", s->part + 1, s->nparts);
    if (s->call_dtypes & ~(1u << s->dtype)) { /* a call of several dtypes: name them all */
        append(buf, len, off, "; the call's dtypes:");
        for (int d = 0, k = 0; d < 16; d++)
            if (s->call_dtypes & (1u << d)) append(buf, len, off, "%s %s", k++ ? "," : "", mlc_dtype_name(d));
    }
    append(buf, len, off, ")");
}

static int mismatch_message(const mlc_team *team, const mlc_request *req, char *buf, size_t len) {
    const mlc_guard *g = &team->guard;
    const int n = team->ctx->size;
    const mlc_signature *first = sig(g, 0);
    int show_counts = 0;
    for (int r = 1; r < n; r++)
        if (sig(g, r)->ntensors == first->ntensors && sig(g, r)->total == first->total &&
            sig(g, r)->layout_hash != first->layout_hash)
            show_counts = 1;
    size_t off = 0;
    buf[0] = '\0';
    append(buf, len, &off, "ranks disagree on team %d request %lld: ", g->id, (long long)req->seq);
    for (int r = 0; r < n; r++) {
        int leader = 1;
        for (int q = 0; q < r && leader; q++) leader = !same(sig(g, q), sig(g, r));
        if (!leader) continue;
        if (r > 0) append(buf, len, &off, "; ");
        append_ranks(buf, len, &off, g, n, r);
        append(buf, len, &off, " submitted ");
        append_signature(buf, len, &off, sig(g, r), show_counts);
    }
    append(buf, len, &off, ". Every rank must make the same calls, with the same tensors, in the same order");
    return MLC_ERR_MISMATCH;
}

static int nonfinite_message(const mlc_team *team, mlc_request *req, char *buf, size_t len) {
    const mlc_guard *g = &team->guard;
    char desc[MLC_MSG_LEN / 2];
    size_t off = 0;
    mlc_describe_request(req, desc, sizeof desc);
    buf[0] = '\0';
    append(buf, len, &off, "NaN or Inf in the input of team %d request %lld (%s): ", g->id,
           (long long)req->seq, desc);
    req->nonfinite_ranks = 0;
    for (int r = 0; r < team->ctx->size; r++) {
        const mlc_signature *s = sig(g, r);
        if (s->nonfinite_tensor < 0) continue;
        if (req->nonfinite_ranks++ == 0) {
            req->nonfinite_rank = r;
            req->nonfinite_tensor = s->nonfinite_tensor;
        } else {
            append(buf, len, &off, "; ");
        }
        append(buf, len, &off, "rank %d tensor %d", r, s->nonfinite_tensor);
        if (s->nonfinite_count > 1)
            append(buf, len, &off, " (and %d more of its tensors)", s->nonfinite_count - 1);
    }
    return MLC_ERR_NONFINITE;
}

/* The direct allreduce: add the n inputs in rank order, the same on every rank.
 * A single tensor is summed where its result goes (this rank's input is safe in
 * its slot); several are summed in acc and unpacked. */
static void reduce_direct(mlc_team *team, mlc_request *req) {
    const mlc_guard *g = &team->guard;
    const int n = team->ctx->size;
    char *sum = req->ntensors == 1 ? req->tensors[0].data : g->acc;
    if (req->total > 0) memcpy(sum, payload(g, 0), req->total * mlc_dtype_size(req->dtype));
    for (int r = 1; r < n; r++) mlc_reduce_sum_into(sum, payload(g, r), req->total, req->dtype);
    if (req->op == MLC_OP_AVERAGE) mlc_divide_by_ranks(sum, req->total, req->dtype, n);
    if (sum == g->acc) mlc_copy_range(req, 0, req->total, g->acc, 0);
    req->done_by_check = 1;
}

static int judge(mlc_team *team, mlc_request *req, char *message) {
    const mlc_guard *g = &team->guard;
    const int n = team->ctx->size;
    int direct = 1;
    for (int r = 1; r < n; r++)
        if (!same(sig(g, 0), sig(g, r))) return mismatch_message(team, req, message, MLC_MSG_LEN);
    for (int r = 0; r < n; r++) {
        if (sig(g, r)->nonfinite_tensor >= 0) return nonfinite_message(team, req, message, MLC_MSG_LEN);
        direct &= sig(g, r)->direct; /* a rank that sent no input (another setting): no shortcut */
    }
    if (direct) reduce_direct(team, req);
    return MLC_OK;
}

/* Some rank's signature carries a stop flag: mark the request, and the team at the
 * first such request; the table is the same on every rank, so is the mark. */
static void note_stop(mlc_team *team, mlc_request *req) {
    mlc_guard *g = &team->guard;
    for (int r = 0; r < team->ctx->size; r++)
        if (sig(g, r)->stop) req->stop_asked = 1;
    int64_t none = -1;
    if (req->stop_asked) atomic_compare_exchange_strong(&g->stop_seq, &none, (int64_t)req->seq);
}

/* Exchange and judge one request (or fail it as the rest of a failed call), then
 * publish the verdict. Called with the guard lock held, in queue order. */
static void check_one(mlc_team *team, mlc_request *req) {
    mlc_guard *g = &team->guard;
    int status;
    req->check_message[0] = '\0';
    if (g->drop_left > 0 && req->part > 0) {
        /* Every rank drops the same parts: what is left of the failed call on this rank. */
        g->drop_left--;
        status = g->drop_status;
        snprintf(req->check_message, MLC_MSG_LEN, "%s", g->drop_message);
    } else {
        g->drop_left = 0;
        sign(team, req, sig(g, team->ctx->rank));
        status = exchange(team, req, req->check_message);
        if (status == MLC_OK) note_stop(team, req);
        if (status == MLC_OK) status = judge(team, req, req->check_message);
        if (status != MLC_OK && req->nparts > 1 && req->part + 1 < req->nparts) {
            g->drop_left = req->nparts - req->part - 1;
            g->drop_status = status;
            snprintf(g->drop_message, MLC_MSG_LEN, "%s", req->check_message);
        }
    }
    req->check_status = status;
    atomic_store_explicit(&req->check_state, MLC_CHECK_DONE, memory_order_release);
}

int mlc_guard_verdict(mlc_team *team, mlc_request *req, char *message) {
    if (atomic_load_explicit(&req->check_state, memory_order_acquire) == MLC_CHECK_NONE) return MLC_OK;
    mlc_guard *g = &team->guard;
    while (atomic_load_explicit(&req->check_state, memory_order_acquire) != MLC_CHECK_DONE) {
        if (pthread_mutex_trylock(&g->lock) != 0) {
            sched_yield(); /* another thread is exchanging: maybe this very request */
            continue;
        }
        while (atomic_load_explicit(&req->check_state, memory_order_acquire) != MLC_CHECK_DONE) {
            pthread_mutex_lock(&team->lock);
            mlc_request *next = g->head; /* never NULL here: req itself is still queued */
            g->head = next->next_check;
            if (!g->head) g->tail = NULL;
            pthread_mutex_unlock(&team->lock);
            check_one(team, next);
        }
        pthread_mutex_unlock(&g->lock);
    }
    if (req->check_status != MLC_OK && message) snprintf(message, MLC_MSG_LEN, "%s", req->check_message);
    return req->check_status;
}
