/* Stall watchdog: a wait that takes too long says what it is waiting for.
 *
 * Every polling wait inside a team operation carries an mlc_stall: the signature
 * exchange (signature.c: which ranks have not reached the request), the
 * transport's message waits (transport/mpi.c: which peer's data), and a keyed
 * group waiting for this rank's own tensors (group.c). Steps: the first poll
 * notes the time; every MLC_STALL_STRIDE-th poll reads the clock again, so a wait
 * that ends quickly costs one clock read. Past the team's warn limit it prints
 * one line to stderr (rank, team, request, what it waits for), again every warn
 * interval; past the abort limit it prints the line with "aborting" and calls
 * MPI_Abort on the team's communicator, which makes mpiexec and srun end every
 * rank of the job with a non-zero exit status. Sends nothing on the wire.
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "team.h"

#define MLC_STALL_STRIDE 64
/* The exit status a stall abort asks MPI_Abort for. */
#define MLC_STALL_EXIT_CODE 3

int mlc_team_set_stall_limits(mlc_team *team, double warn_seconds, double abort_seconds) {
    /* !(x >= 0) also refuses NaN */
    if (!team || !(warn_seconds >= 0) || !(abort_seconds >= 0)) return MLC_ERR_ARG;
    team->guard.stall_warn = warn_seconds;
    team->guard.stall_abort = abort_seconds;
    return MLC_OK;
}

void mlc_describe_request(const mlc_request *req, char *buf, size_t len) {
    int off = 0;
    if (req->is_group) off = snprintf(buf, len, "keyed group %lld: ", (long long)req->key);
    if (off < 0 || (size_t)off >= len) return;
    const char *s = req->ntensors == 1 ? "" : "s";
    if (req->kind == MLC_KIND_BROADCAST)
        snprintf(buf + off, len - off, "broadcast from rank %d of %d %s tensor%s, %lld elements",
                 req->root, req->ntensors, mlc_dtype_name(req->dtype), s, (long long)req->total);
    else
        snprintf(buf + off, len - off, "%s of %d %s tensor%s, %lld elements",
                 req->op == MLC_OP_SUM ? "sum" : "average", req->ntensors, mlc_dtype_name(req->dtype),
                 s, (long long)req->total);
}

static void report(const mlc_stall *s, const mlc_team *team, const mlc_request *req,
                   mlc_stall_describe describe, const void *arg, double now, int aborting) {
    char what[MLC_MSG_LEN], desc[MLC_MSG_LEN / 2];
    describe(arg, what, sizeof what);
    mlc_describe_request(req, desc, sizeof desc);
    /* One fprintf per line, so lines of ranks sharing a terminal do not interleave. */
    if (aborting)
        fprintf(stderr,
                "ml_comm: rank %d: team %d request %lld (%s) has waited %.1f s for %s; aborting the "
                "job (stall abort limit %g s)\n",
                team->ctx->rank, team->guard.id, (long long)req->seq, desc, now - s->start, what,
                team->guard.stall_abort);
    else
        fprintf(stderr, "ml_comm: rank %d: team %d request %lld (%s) has waited %.1f s for %s\n",
                team->ctx->rank, team->guard.id, (long long)req->seq, desc, now - s->start, what);
    fflush(stderr);
}

/* Warn or abort if a limit has passed; s->start is set. */
static void check(mlc_stall *s, const mlc_team *team, const mlc_request *req,
                  mlc_stall_describe describe, const void *arg, double now) {
    const mlc_guard *g = &team->guard;
    if (g->stall_abort > 0 && now - s->start >= g->stall_abort) {
        report(s, team, req, describe, arg, now, 1);
        MPI_Abort(team->ctx->comm, MLC_STALL_EXIT_CODE);
        _exit(MLC_STALL_EXIT_CODE); /* MPI_Abort does not return; this is a guard */
    }
    if (g->stall_warn > 0 && now >= s->next_warn) {
        report(s, team, req, describe, arg, now, 0);
        s->next_warn = now + g->stall_warn;
    }
}

static void start(mlc_stall *s, const mlc_team *team, double now) {
    s->start = now;
    s->next_warn = now + team->guard.stall_warn;
}

void mlc_stall_poll(mlc_stall *s, const mlc_team *team, const mlc_request *req,
                    mlc_stall_describe describe, const void *arg) {
    if (s->polls++ % MLC_STALL_STRIDE) return;
    const mlc_guard *g = &team->guard;
    if (g->stall_warn <= 0 && g->stall_abort <= 0) return;
    double now = mlc_now();
    if (s->start == 0) start(s, team, now);
    else check(s, team, req, describe, arg, now);
}

void mlc_stall_cond_wait(mlc_stall *s, pthread_cond_t *cv, pthread_mutex_t *mutex,
                         const mlc_team *team, const mlc_request *req,
                         mlc_stall_describe describe, const void *arg) {
    const mlc_guard *g = &team->guard;
    if (g->stall_warn <= 0 && g->stall_abort <= 0) {
        pthread_cond_wait(cv, mutex);
        return;
    }
    double now = mlc_now();
    if (s->start == 0) start(s, team, now);
    else check(s, team, req, describe, arg, now);
    /* Sleep until the next limit at most; the condition variable runs on CLOCK_REALTIME. */
    double wake = g->stall_warn > 0 ? s->next_warn : s->start + g->stall_abort;
    if (g->stall_abort > 0 && s->start + g->stall_abort < wake) wake = s->start + g->stall_abort;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double until = ts.tv_sec + ts.tv_nsec * 1e-9 + (wake - now) + 1e-3;
    ts.tv_sec = (time_t)until;
    ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(cv, mutex, &ts);
}

/* ---- the data phase: the transport notes its peers ---- */

void mlc_watch_init(struct mlc_watch *w, const mlc_team *team, const mlc_request *req) {
    w->team = team;
    w->req = req;
    w->recv_peer = w->send_peer = -1;
}

static void describe_peers(const void *arg, char *buf, size_t len) {
    const struct mlc_watch *w = arg;
    if (w->recv_peer >= 0 && w->send_peer >= 0 && w->send_peer != w->recv_peer)
        snprintf(buf, len, "data from rank %d and for rank %d to take this rank's", w->recv_peer,
                 w->send_peer);
    else if (w->recv_peer >= 0)
        snprintf(buf, len, "data from rank %d", w->recv_peer);
    else if (w->send_peer >= 0)
        snprintf(buf, len, "rank %d to take this rank's data", w->send_peer);
    else
        snprintf(buf, len, "its messages to complete");
}

void mlc_watch_poll(struct mlc_watch *w, mlc_stall *s) {
    mlc_stall_poll(s, w->team, w->req, describe_peers, w);
}
