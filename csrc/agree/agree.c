/* The agreement check's life cycle and settings: buffers sized for the exchange
 * (exchange.c), the settings a team hands down (layout and finite checks, direct
 * bytes, stall limits, the job's abort), the stop flag, the counts, and the queue of
 * registered requests in submission order, each marked ready once the team layer
 * has its input. */
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "algos/algo.h"

void mlc_agree_init(mlc_agree *ag) {
    memset(ag, 0, sizeof *ag);
    ag->layout = 1;
    ag->dog.warn = MLC_DEFAULT_STALL_WARN_SECONDS;
    atomic_init(&ag->stop_requested, 0);
    atomic_init(&ag->stop_seq, -1);
    atomic_init(&ag->messages, 0);
    atomic_init(&ag->checks, 0);
    pthread_mutex_init(&ag->exchange_lock, NULL);
    pthread_mutex_init(&ag->list_lock, NULL);
    pthread_cond_init(&ag->ready_cv, NULL);
    pthread_cond_init(&ag->verdict_cv, NULL);
}

int mlc_agree_set_direct_bytes(mlc_agree *ag, int64_t bytes) {
    if (bytes < 0) return MLC_ERR_ARG;
    pthread_mutex_lock(&ag->exchange_lock);
    ag->direct_bytes = (bytes < MLC_DIRECT_MAX_BYTES ? bytes : MLC_DIRECT_MAX_BYTES) / 8 * 8;
    pthread_mutex_unlock(&ag->exchange_lock);
    return MLC_OK;
}

void mlc_agree_set_checks(mlc_agree *ag, int layout, int finite) {
    ag->layout = layout != 0;
    ag->finite = finite != 0;
}

void mlc_agree_set_team_id(mlc_agree *ag, int team_id) { ag->dog.team_id = team_id; }

void mlc_agree_set_stall_limits(mlc_agree *ag, double warn_seconds, double abort_seconds) {
    ag->dog.warn = warn_seconds;
    ag->dog.abort = abort_seconds;
}

void mlc_agree_set_job(mlc_agree *ag, void (*abort_job)(void *, int), void *abort_arg, mlc_waits *waits) {
    ag->dog.abort_job = abort_job;
    ag->dog.abort_arg = abort_arg;
    ag->waits = waits;
}

int mlc_agree_open(mlc_agree *ag, const mlc_tp *tp) {
    ag->tp = *tp;
    ag->tp.message = ag->tp_message;
    ag->dog.rank = tp->rank;
    const int n = tp->size;
    const size_t rec = MLC_AGREE_RECORD_BYTES + MLC_DIRECT_MAX_BYTES; /* exchange.c's record and payload */
    ag->direct_bytes = MLC_DEFAULT_DIRECT_BYTES;
    ag->mine = malloc(rec);
    ag->theirs = malloc(rec);
    ag->joined = malloc(MLC_DIRECT_MAX_BYTES);
    ag->slots = calloc(n, mlc_signature_bytes());
    ag->reqs = calloc(2 * MLC_TABLE_WINDOW, sizeof *ag->reqs);
    if (!ag->mine || !ag->theirs || !ag->joined || !ag->slots || !ag->reqs || mlc_arrivals_open(&ag->arrivals, n))
        return MLC_ERR_NOMEM;
    return MLC_OK;
}

void mlc_agree_destroy(mlc_agree *ag) {
    mlc_arrivals_close(&ag->arrivals);
    free(ag->mine);
    free(ag->theirs);
    free(ag->joined);
    free(ag->slots);
    free(ag->reqs);
    free(ag->ahead_scratch);
    ag->ahead_scratch = NULL;
    ag->mine = ag->theirs = ag->joined = ag->slots = NULL;
    ag->reqs = NULL;
    pthread_mutex_destroy(&ag->exchange_lock);
    pthread_mutex_destroy(&ag->list_lock);
    pthread_cond_destroy(&ag->ready_cv);
    pthread_cond_destroy(&ag->verdict_cv);
}

int mlc_agree_set_ahead_endpoint(mlc_agree *ag, const mlc_tp *tp) {
    if (!ag->ahead_scratch && !(ag->ahead_scratch = malloc(MLC_RING_PIECE_BYTES))) return MLC_ERR_NOMEM;
    ag->ahead_tp = *tp;
    ag->ahead_tp.message = ag->ahead_message;
    ag->ahead_tp.progress = NULL;
    ag->ahead_tp.progress_arg = NULL;
    return MLC_OK;
}

void mlc_agree_cancel(mlc_agree *ag) {
    if (ag->tp.ops) mlc_arrivals_cancel(&ag->arrivals, &ag->tp);
}

void mlc_agree_shutdown(mlc_agree *ag) {
    pthread_mutex_lock(&ag->list_lock);
    ag->shutting_down = 1;
    pthread_cond_broadcast(&ag->ready_cv);
    pthread_mutex_unlock(&ag->list_lock);
}

void mlc_agree_request_stop(mlc_agree *ag) { atomic_store(&ag->stop_requested, 1); }

int64_t mlc_agree_stop_seq(mlc_agree *ag) { return atomic_load(&ag->stop_seq); }

void mlc_agree_counts(mlc_agree *ag, int64_t *messages, int64_t *checks) {
    if (messages) *messages = atomic_load(&ag->messages);
    if (checks) *checks = atomic_load(&ag->checks);
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
