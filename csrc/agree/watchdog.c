/* Stall watchdog: a wait that takes too long says what it is waiting for.
 *
 * Every polling wait inside a team operation carries an mlc_stall: the signature
 * exchange (exchange.c: which ranks have not reached the request), the
 * transport's message waits (through its progress hook: which peer's data), and
 * a keyed group waiting for this rank's own tensors (team/group.c). Steps: the
 * MLC_STALL_STRIDE-th poll notes the time and every MLC_STALL_STRIDE-th poll after it
 * reads the clock again, so a wait that ends quickly reads no clock (most end in a few
 * polls; the stride's first polls take microseconds, nothing beside the seconds of the
 * limits). Past the warn limit it
 * prints one line to stderr (rank, team, request, what it waits for), again every
 * warn interval; past the abort limit it prints the line with "aborting" and
 * calls the team's abort_job (MPI_Abort), which makes mpiexec and srun end every
 * rank of the job with a non-zero exit status. Sends nothing on the wire. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "watchdog.h"

#define MLC_STALL_STRIDE 64
/* The exit status a stall abort asks for. */
#define MLC_STALL_EXIT_CODE 3

void mlc_stall_begin(mlc_stall *s, const mlc_watchdog *dog, int64_t seq,
                     mlc_describe_fn describe_request, const void *request,
                     mlc_describe_fn describe_wait, const void *wait_arg) {
    *s = (mlc_stall){dog, seq, describe_request, describe_wait, request, wait_arg, 0, 0, 0};
}

static void report(const mlc_stall *s, double now, int aborting) {
    char what[MLC_MSG_LEN], desc[MLC_MSG_LEN / 2];
    s->describe_wait(s->wait_arg, what, sizeof what);
    s->describe_request(s->request, desc, sizeof desc);
    /* One fprintf per line, so lines of ranks sharing a terminal do not interleave. */
    fprintf(stderr, "ml_comm: rank %d: team %d request %lld (%s) has waited %.1f s for %s%s",
            s->dog->rank, s->dog->team_id, (long long)s->seq, desc, now - s->start, what,
            aborting ? "; aborting the job (stall abort limit " : "\n");
    if (aborting) fprintf(stderr, "%g s)\n", s->dog->abort);
    fflush(stderr);
}

/* Warn or abort if a limit has passed; s->start is set. */
static void check(mlc_stall *s, double now) {
    const mlc_watchdog *d = s->dog;
    if (d->abort > 0 && now - s->start >= d->abort) {
        report(s, now, 1);
        if (d->abort_job) d->abort_job(d->abort_arg, MLC_STALL_EXIT_CODE);
        _exit(MLC_STALL_EXIT_CODE); /* abort_job does not return; this is a guard */
    }
    if (d->warn > 0 && now >= s->next_warn) {
        report(s, now, 0);
        s->next_warn = now + d->warn;
    }
}

static void start(mlc_stall *s, double now) {
    s->start = now;
    s->next_warn = now + s->dog->warn;
}

void mlc_stall_poll(mlc_stall *s) {
    if (++s->polls % MLC_STALL_STRIDE) return;
    if (s->dog->warn <= 0 && s->dog->abort <= 0) return;
    double now = mlc_now();
    if (s->start == 0) start(s, now);
    else check(s, now);
}

void mlc_stall_cond_wait(mlc_stall *s, pthread_cond_t *cv, pthread_mutex_t *mutex) {
    const mlc_watchdog *d = s->dog;
    if (d->warn <= 0 && d->abort <= 0) {
        pthread_cond_wait(cv, mutex);
        return;
    }
    double now = mlc_now();
    if (s->start == 0) start(s, now);
    else check(s, now);
    /* Sleep until the next limit at most; the condition variable runs on CLOCK_REALTIME. */
    double wake = d->warn > 0 ? s->next_warn : s->start + d->abort;
    if (d->abort > 0 && s->start + d->abort < wake) wake = s->start + d->abort;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double until = ts.tv_sec + ts.tv_nsec * 1e-9 + (wake - now) + 1e-3;
    ts.tv_sec = (time_t)until;
    ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(cv, mutex, &ts);
}

static void describe_peers(const void *arg, char *buf, size_t len) {
    const mlc_tp *tp = arg;
    if (tp->recv_peer >= 0 && tp->send_peer >= 0 && tp->send_peer != tp->recv_peer)
        snprintf(buf, len, "data from rank %d and for rank %d to take this rank's", tp->recv_peer,
                 tp->send_peer);
    else if (tp->recv_peer >= 0)
        snprintf(buf, len, "data from rank %d", tp->recv_peer);
    else if (tp->send_peer >= 0)
        snprintf(buf, len, "rank %d to take this rank's data", tp->send_peer);
    else
        snprintf(buf, len, "its messages to complete");
}

void mlc_stall_transport_progress(void *arg, const mlc_tp *tp, int64_t poll) {
    mlc_stall *s = arg;
    if (poll == 0) s->polls = 0, s->start = 0; /* each wait is timed on its own */
    s->describe_wait = describe_peers;
    s->wait_arg = tp;
    mlc_stall_poll(s);
}
