/* Which requests send a ring's first piece ahead of their agreement check
 * (algos/ring_ahead.c), and what becomes of it after the verdict.
 *
 * Two requests of rows run a ring after a check, on the caller's thread: an allgather
 * (its data request, covered by the check of its counts request, rows.c) and a
 * reduce-scatter. Each sends ahead the first piece of its own first block when that
 * block has at least MLC_AHEAD_MIN_BYTES (mlc_ring_ahead_bytes): before the check, it
 * posts that send to rank r+1 and a receive from rank r-1. Every rank's signature
 * says how many bytes it sent ahead.
 *
 * After the verdict, what ranks r-1 and r+1 sent is known on every rank:
 *   agreed      from the agreed sizes (an allgather's counts, which its check carries;
 *               a reduce-scatter's shares), with the same rule. The reduce-scatter's
 *               ring, or the allgather's data request (the next request of rows on
 *               this team), completes the first round (algos/ring_ahead.c: the empty
 *               message a neighbour may wait for, the receive not yet posted) and
 *               starts at its second.
 *   disagreed   from the neighbours' signatures in the table: the exchange itself
 *               (agree/exchange.c, settle_ahead) completes the first round and drops
 *               what it received, on whichever thread runs it while the caller waits;
 *               the request fails as before. Nothing stays posted.
 *   no verdict  (the team shut down, a transport failed): whatever is posted is
 *               cancelled.
 * Every rank thus settles each check's first round before its next one posts, with one
 * message between neighbours where either sent ahead: the messages on the ahead tag
 * pair up in order, even where ranks made different numbers of requests before a
 * disagreement. An allgather whose data request does not follow its counts request
 * (its caller gave up in between) has its first round completed by the next request of
 * rows, or cancelled when the team is destroyed. The rest runs on the caller's thread,
 * under the team's caller lock. */
#include <stdlib.h>

#include "team.h"

enum { AHEAD_NONE = 0, AHEAD_POSTED = 1, AHEAD_AGREED = 2 };

/* A ring of rows whose first round may go ahead: an allgather's counts request (its
 * sizes inside the check) or a reduce-scatter, on the caller's thread. */
static int ring_of_rows(const mlc_team *team, const mlc_request *req) {
    if (!req->plan.on_caller || req->rows.covered || team->ctx->size < 2) return 0;
    if (req->kind == MLC_KIND_ALLGATHER) return req->part == 0 && req->nparts == 2 && req->plan.direct;
    return req->kind == MLC_KIND_REDUCESCATTER;
}

/* Once it took its place: it is one, and the check takes it (only a verdict says what
 * rank r-1 sent). */
static int checked(const mlc_team *team, const mlc_request *req) {
    return ring_of_rows(team, req) && atomic_load(&req->agreement.state) != MLC_CHECK_NONE;
}

static int64_t row_bytes(const mlc_request *req) { return req->rows.row_elements * mlc_dtype_size(req->dtype); }

/* The first block rank r sends in this request's ring: its bytes, and where they are. */
static int64_t first_block(const mlc_team *team, const mlc_request *req, int r, const char **own) {
    if (req->kind == MLC_KIND_ALLGATHER) { /* its own rows */
        if (own) *own = req->rows.rows_in;
        return req->rows.rows_bytes;
    }
    const int n = team->ctx->size, block = mlc_mod(r - 1, n); /* reduce-scatter: block r-1 */
    if (own) *own = req->rows.call.input + mlc_rows_before(req->rows.call.recv_rows, block) * row_bytes(req);
    return req->rows.call.recv_rows[block] * row_bytes(req);
}

int64_t mlc_ahead_bytes_of(const mlc_team *team, const mlc_request *req, const char **own) {
    if (own) *own = NULL;
    if (!ring_of_rows(team, req) || !mlc_agree_wants(&team->agree, req->kind, req->dtype)) return 0;
    return mlc_ring_ahead_bytes(first_block(team, req, team->ctx->rank, own));
}

/* What rank q sent ahead, from the sizes the ranks agreed on. */
static int64_t sent_by(const mlc_team *team, const mlc_request *req, int q) {
    if (req->kind == MLC_KIND_ALLGATHER) /* the counts request's output: every rank's rows */
        return mlc_ring_ahead_bytes(((const int64_t *)req->rows.call.output)[q] * row_bytes(req));
    return mlc_ring_ahead_bytes(first_block(team, req, q, NULL));
}

/* After an agreed check: what the ring completes, now that its neighbours' pieces are
 * known; 0 when nothing was posted and nothing is owed or comes. */
static int agreed(mlc_team *team, const mlc_request *req) {
    const int n = team->ctx->size, r = team->ctx->rank;
    const int64_t expected = sent_by(team, req, mlc_mod(r - 1, n)), right_sent = sent_by(team, req, (r + 1) % n);
    if (team->caller.ahead_state == AHEAD_NONE) {
        if (expected == 0 && right_sent == 0) return 0;
        mlc_ring_ahead_post(&team->caller.tp, &team->caller.ahead, NULL, 0); /* nothing of this rank */
    }
    team->caller.ahead.expected = expected;
    team->caller.ahead.right_sent = right_sent;
    return 1;
}

static void describe_request(const void *arg, char *buf, size_t len) {
    mlc_sign_input in;
    const mlc_request *req = arg;
    mlc_sign_input_of(req->team, req, &in);
    mlc_describe_input(&in, buf, len);
}

/* The previous check's first round, completed on the caller's transport: watched like
 * every other wait, so that a neighbour that never sends its side is named. req has no
 * place in the queue yet: the wait is named after the team's last request. */
static void complete_watched(mlc_team *team, const mlc_request *req) {
    mlc_stall stall;
    pthread_mutex_lock(&team->lock);
    const int64_t last = (int64_t)team->next_seq;
    pthread_mutex_unlock(&team->lock);
    mlc_stall_begin(&stall, &team->agree.dog, last, describe_request, req, NULL, NULL);
    mlc_tp_set_progress(&team->caller.tp, mlc_stall_transport_progress, &stall);
    mlc_ring_ahead_complete(&team->caller.tp, &team->caller.ahead);
    mlc_tp_set_progress(&team->caller.tp, NULL, NULL);
}

void mlc_ahead_prepare(mlc_team *team, mlc_request *req) {
    if (team->caller.ahead_state == AHEAD_AGREED && req->rows.covered && req->kind == MLC_KIND_ALLGATHER) {
        req->rows.call.ahead = &team->caller.ahead; /* the allgather's data: its ring completes it */
    } else if (team->caller.ahead_state != AHEAD_NONE) {
        /* The allgather's data request never came (its caller gave up): the first round
         * is completed here, as every rank's next request does. */
        complete_watched(team, req);
    }
    team->caller.ahead_state = AHEAD_NONE;
}

void mlc_ahead_post(mlc_team *team, mlc_request *req, int64_t bytes) {
    const char *own = NULL;
    if (bytes <= 0 || !checked(team, req)) return;
    first_block(team, req, team->ctx->rank, &own);
    if (mlc_ring_ahead_post(&team->caller.tp, &team->caller.ahead, own, bytes) == MLC_OK)
        team->caller.ahead_state = AHEAD_POSTED;
}

void mlc_ahead_verdict(mlc_team *team, mlc_request *req, int verdict) {
    if (!checked(team, req)) return;
    if (verdict != MLC_OK) {
        /* After a table the exchange completed both sides; without one, cancel. */
        if (req->agreement.left_ahead < 0 && team->caller.ahead_state != AHEAD_NONE)
            mlc_ring_ahead_abandon(&team->caller.tp, &team->caller.ahead);
        team->caller.ahead_state = AHEAD_NONE;
    } else if (req->kind == MLC_KIND_REDUCESCATTER) {
        if (agreed(team, req)) req->rows.call.ahead = &team->caller.ahead; /* its ring completes it */
        team->caller.ahead_state = AHEAD_NONE;
    } /* an allgather's counts request: after it, with every rank's counts */
}

void mlc_ahead_done(mlc_team *team, mlc_request *req, int verdict, int rc) {
    if (!checked(team, req) || req->kind != MLC_KIND_ALLGATHER || verdict != MLC_OK) return;
    if (rc != MLC_OK) {
        if (team->caller.ahead_state != AHEAD_NONE) mlc_ring_ahead_abandon(&team->caller.tp, &team->caller.ahead);
        team->caller.ahead_state = AHEAD_NONE;
        return;
    }
    team->caller.ahead_state = agreed(team, req) ? AHEAD_AGREED : AHEAD_NONE; /* for its data request */
}

void mlc_ahead_close(mlc_team *team, int cancel) {
    if (cancel && team->caller.ahead_state != AHEAD_NONE) mlc_ring_ahead_abandon(&team->caller.tp, &team->caller.ahead);
    team->caller.ahead_state = AHEAD_NONE;
    free(team->caller.ahead.buf);
    team->caller.ahead.buf = NULL;
}
