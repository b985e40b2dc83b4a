/* The agreement exchange: every rank learns every rank's signature of a request
 * before its data moves.
 *
 * Steps, per request, n ranks: the first thread of this rank that needs the
 * verdict (a team thread starting the request, or a blocking caller about to run
 * it) takes the exchange lock and, for each registered request up to its own, in
 * queue order: waits until the team layer has made it ready (a keyed group with
 * the finite check waits for its last tensor), signs it (signature.c), posts a
 * receive from each of the n-1 peers, sends its signature to each of them, and
 * waits for all 2(n-1) messages, on a communicator that carries nothing else,
 * under one tag. Every rank exchanges its requests one at a time in the same
 * order and messages from one sender never overtake each other, so the k-th
 * signature from a peer belongs to its k-th request. Each rank then judges the n
 * signatures; the same table gives the same verdict everywhere, so either every
 * rank moves the request's data or every rank fails it with the same message and
 * goes on, in step, with the next request.
 *
 * Direct allreduce: when the plan says so, the signature carries the whole input
 * and the exchange is also the reduction (algos/allreduce_direct.c sums the n
 * inputs in rank order). One message latency in all.
 *
 * Bytes on the wire per rank and request: (n-1) * 104 (the signature) sent and as
 * many received, all at once: one message latency before the data moves; for a
 * direct allreduce of N bytes, (n-1) * (104 + N) each way and nothing after.
 * Sending to every peer (not along a tree) is what lets a waiting rank name
 * exactly the ranks that have not reached the request (the stall watchdog prints
 * them). ML_COMM_CHECK_LAYOUT=0 switches the exchange off (then a mismatch hangs
 * or corrupts, as in MPI). A single rank exchanges nothing; with the finite check
 * it still judges its own scan.
 *
 * Stopping together: mlc_agree_request_stop (a signal handler's path: one atomic
 * store) makes every later signature of this rank carry a stop flag. The verdict
 * on the first request whose table holds one marks the request (stop_asked) and
 * the engine (stop_seq) alike on every rank, so all ranks learn of it at the same
 * request, without a message of its own. Without the exchange
 * (ML_COMM_CHECK_LAYOUT=0) nothing carries it: the Python layer refuses to stop
 * together then; one rank answers from its own flag. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "algos/algo.h"

#define MLC_SIG_TAG 0
/* Payload room over all ranks of one exchange: caps direct_bytes at n ranks to this
 * over n, so that a rank never sends more than this per direct allreduce. */
#define MLC_DIRECT_TABLE_BYTES (128 * 1024)

static mlc_signature *slot(const mlc_agree *ag, int r) {
    return (mlc_signature *)(ag->slots + (size_t)r * ag->slot_bytes);
}

static char *payload(const mlc_agree *ag, int r) { return (char *)slot(ag, r) + mlc_signature_bytes(); }

/* ---- life cycle and settings ---- */

void mlc_agree_init(mlc_agree *ag) {
    memset(ag, 0, sizeof *ag);
    ag->layout = 1;
    ag->dog.warn = MLC_DEFAULT_STALL_WARN_SECONDS;
    atomic_init(&ag->stop_requested, 0);
    atomic_init(&ag->stop_seq, -1);
    pthread_mutex_init(&ag->exchange_lock, NULL);
    pthread_mutex_init(&ag->list_lock, NULL);
    pthread_cond_init(&ag->ready_cv, NULL);
}

/* Slots for direct allreduces of up to `bytes` (less at large n). */
static int size_slots(mlc_agree *ag, int64_t bytes) {
    const int n = ag->tp.size;
    const int64_t cap = MLC_DIRECT_TABLE_BYTES / n;
    bytes = (bytes < cap ? bytes : cap) / 8 * 8; /* slots stay 8-byte aligned */
    size_t bytes_per_slot = mlc_signature_bytes() + (size_t)bytes;
    char *slots = realloc(ag->slots, bytes_per_slot * n);
    if (!slots) return MLC_ERR_NOMEM;
    ag->slots = slots;
    char *acc = realloc(ag->acc, bytes > 0 ? bytes : 8);
    if (!acc) return MLC_ERR_NOMEM;
    ag->acc = acc;
    ag->slot_bytes = bytes_per_slot;
    ag->direct_bytes = bytes;
    return MLC_OK;
}

int mlc_agree_set_direct_bytes(mlc_agree *ag, int64_t bytes) {
    if (bytes < 0) return MLC_ERR_ARG;
    pthread_mutex_lock(&ag->exchange_lock);
    int rc = size_slots(ag, bytes);
    pthread_mutex_unlock(&ag->exchange_lock);
    return rc;
}

int mlc_agree_open(mlc_agree *ag, const mlc_tp *tp) {
    ag->tp = *tp;
    ag->tp.message = ag->tp_message;
    ag->dog.rank = tp->rank;
    const int n = tp->size;
    ag->reqs = calloc(2 * (size_t)n, sizeof *ag->reqs);
    if (!ag->reqs || size_slots(ag, MLC_DEFAULT_DIRECT_BYTES) != MLC_OK)
        return MLC_ERR_NOMEM;
    return MLC_OK;
}

void mlc_agree_destroy(mlc_agree *ag) {
    free(ag->slots);
    free(ag->acc);
    free(ag->reqs);
    ag->slots = ag->acc = NULL;
    ag->reqs = NULL;
    pthread_mutex_destroy(&ag->exchange_lock);
    pthread_mutex_destroy(&ag->list_lock);
    pthread_cond_destroy(&ag->ready_cv);
}

void mlc_agree_shutdown(mlc_agree *ag) {
    pthread_mutex_lock(&ag->list_lock);
    ag->shutting_down = 1;
    pthread_cond_broadcast(&ag->ready_cv);
    pthread_mutex_unlock(&ag->list_lock);
}

void mlc_agree_request_stop(mlc_agree *ag) { atomic_store(&ag->stop_requested, 1); }

int64_t mlc_agree_stop_seq(mlc_agree *ag) { return atomic_load(&ag->stop_seq); }

/* Some rank's signature carries a stop flag: mark the request, and the engine at
 * the first such request; the table is the same on every rank, so is the mark. */
static void note_stop(mlc_agree *ag, mlc_agreement *a) {
    a->stop_asked = mlc_any_stop(ag->slots, ag->slot_bytes, ag->tp.size);
    int64_t none = -1;
    if (a->stop_asked) atomic_compare_exchange_strong(&ag->stop_seq, &none, a->seq);
}

int mlc_agree_wants(const mlc_agree *ag, int kind, int dtype) {
    if (ag->tp.size > 1) return ag->layout || ag->finite;
    return ag->finite && kind == MLC_KIND_ALLREDUCE && mlc_dtype_is_float(dtype);
}

void mlc_agree_register(mlc_agree *ag, mlc_agreement *a, int64_t seq, const mlc_sign_input *in) {
    a->seq = seq;
    a->next = NULL;
    if (in) a->in = *in;
    atomic_store_explicit(&a->ready, in != NULL, memory_order_release);
    atomic_store_explicit(&a->state, MLC_CHECK_PENDING, memory_order_relaxed);
    pthread_mutex_lock(&ag->list_lock);
    if (ag->tail) ag->tail->next = a;
    else ag->head = a;
    ag->tail = a;
    pthread_mutex_unlock(&ag->list_lock);
}

void mlc_agree_ready(mlc_agree *ag, mlc_agreement *a, const mlc_sign_input *in) {
    pthread_mutex_lock(&ag->list_lock);
    a->in = *in;
    atomic_store_explicit(&a->ready, 1, memory_order_release);
    pthread_cond_broadcast(&ag->ready_cv);
    pthread_mutex_unlock(&ag->list_lock);
}

/* ---- the exchange ---- */

/* The peers whose signature has not arrived: those that have not reached the request. */
static void describe_missing(const void *arg, char *buf, size_t len) {
    mlc_agree *ag = (mlc_agree *)arg;
    const int me = ag->tp.rank;
    char ranks[MLC_MSG_LEN] = "";
    size_t off = 0;
    int nmissing = 0;
    for (int k = 0; k < ag->tp.size - 1; k++) {
        if (mlc_tp_peek(&ag->tp, &ag->reqs[k])) continue;
        mlc_append(ranks, sizeof ranks, &off, "%s%d", nmissing++ ? ", " : "", k < me ? k : k + 1);
    }
    snprintf(buf, len, "%s %s to reach it", nmissing == 1 ? "rank" : "ranks", nmissing ? ranks : "?");
}

static void describe_agreement(const void *arg, char *buf, size_t len) {
    mlc_describe_input(&((const mlc_agreement *)arg)->in, buf, len);
}

static void describe_inputs(const void *arg, char *buf, size_t len) {
    snprintf(buf, len, "this rank's own inputs of the request to be submitted");
}

static void stall_progress(void *arg, const mlc_tp *tp, int64_t poll) { mlc_stall_poll(arg); }

/* Post every receive and send, then wait for all of them. After an error nothing
 * stays posted: the next exchange reuses the handles. */
static int exchange(mlc_agree *ag, mlc_agreement *a) {
    mlc_tp *tp = &ag->tp;
    const int n = tp->size, me = tp->rank, npeers = n - 1;
    const mlc_signature *mine = slot(ag, me);
    const int64_t bytes = (int64_t)mlc_signature_bytes() +
                          (a->in.direct ? a->in.total * mlc_dtype_size(a->in.dtype) : 0);
    int rc = MLC_OK, nrecv = 0, nsend = 0;
    for (int k = 0; k < npeers && rc == MLC_OK; k++) {
        int peer = k < me ? k : k + 1;
        rc = mlc_tp_irecv(tp, slot(ag, peer), (int64_t)ag->slot_bytes, peer, MLC_SIG_TAG, &ag->reqs[k]);
        nrecv += rc == MLC_OK;
    }
    for (int k = 0; k < npeers && rc == MLC_OK; k++) {
        int peer = k < me ? k : k + 1;
        rc = mlc_tp_isend(tp, mine, bytes, peer, MLC_SIG_TAG, &ag->reqs[npeers + k]);
        nsend += rc == MLC_OK;
    }
    if (rc != MLC_OK) {
        mlc_tp_abandon(tp, nrecv, ag->reqs);
        mlc_tp_abandon(tp, nsend, ag->reqs + npeers);
        snprintf(a->message, MLC_MSG_LEN, "%.480s (agreement check)", ag->tp_message);
        return rc;
    }
    mlc_stall stall;
    mlc_stall_begin(&stall, &ag->dog, a->seq, describe_agreement, a, describe_missing, ag);
    mlc_tp_set_progress(tp, stall_progress, &stall);
    if ((rc = mlc_tp_waitall(tp, 2 * npeers, ag->reqs)) != MLC_OK) {
        mlc_tp_abandon(tp, 2 * npeers, ag->reqs);
        snprintf(a->message, MLC_MSG_LEN, "%.480s (agreement check)", ag->tp_message);
    }
    return rc;
}

/* The direct allreduce: sum the n payloads in rank order where the result goes.
 * A single tensor is summed in place (this rank's input is safe in its slot);
 * several are summed in acc and unpacked. */
static void reduce_direct(mlc_agree *ag, mlc_agreement *a) {
    const mlc_sign_input *in = &a->in;
    const int n = ag->tp.size;
    const char *inputs[n];
    for (int r = 0; r < n; r++) inputs[r] = payload(ag, r);
    char *sum = in->ntensors == 1 ? in->tensors[0].data : ag->acc;
    mlc_direct_sum(sum, inputs, n, in->total, in->dtype, in->op);
    if (in->ntensors != 1) mlc_scatter_range(in->tensors, in->starts, in->ntensors, in->dtype, 0, in->total, sum);
    a->done_by_exchange = 1;
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

/* Exchange and judge one request (or fail it as the rest of a failed call), then
 * publish the verdict. Called with the exchange lock held, in queue order. */
static void check_one(mlc_agree *ag, mlc_agreement *a) {
    int status, direct = 0;
    a->message[0] = '\0';
    if ((status = wait_ready(ag, a)) != MLC_OK) {
        snprintf(a->message, MLC_MSG_LEN, "the team was shut down before this rank's inputs arrived");
    } else if (ag->drop_left > 0 && a->in.part > 0) {
        /* Every rank drops the same parts: what is left of the failed call on this rank. */
        ag->drop_left--;
        status = ag->drop_status;
        snprintf(a->message, MLC_MSG_LEN, "%s", ag->drop_message);
    } else {
        ag->drop_left = 0;
        if (!a->in.direct || (int64_t)(a->in.total * mlc_dtype_size(a->in.dtype)) > ag->direct_bytes)
            a->in.direct = 0; /* the threshold shrank since the plan was made */
        mlc_sign(&a->in, atomic_load(&ag->stop_requested), slot(ag, ag->tp.rank));
        status = ag->tp.size > 1 ? exchange(ag, a) : MLC_OK;
        if (status == MLC_OK) note_stop(ag, a);
        if (status == MLC_OK) status = mlc_judge(ag->slots, ag->slot_bytes, ag->tp.size, ag->dog.team_id, a, &direct);
        if (status == MLC_OK && direct) reduce_direct(ag, a);
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
    while (atomic_load_explicit(&a->state, memory_order_acquire) != MLC_CHECK_DONE) {
        /* Another thread may be exchanging, maybe this very request: wait for it
         * asleep (its exchange may wait long for a late peer). */
        pthread_mutex_lock(&ag->exchange_lock);
        while (atomic_load_explicit(&a->state, memory_order_acquire) != MLC_CHECK_DONE) {
            pthread_mutex_lock(&ag->list_lock);
            mlc_agreement *next = ag->head; /* never NULL here: a itself is still queued */
            ag->head = next->next;
            if (!ag->head) ag->tail = NULL;
            pthread_mutex_unlock(&ag->list_lock);
            check_one(ag, next);
        }
        pthread_mutex_unlock(&ag->exchange_lock);
    }
    if (a->status != MLC_OK && message) snprintf(message, MLC_MSG_LEN, "%s", a->message);
    return a->status;
}
