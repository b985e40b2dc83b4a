/* Waiting, over any transport implementation.
 *
 * Waits poll instead of blocking inside the implementation: a blocked MPI call
 * spins, and with more communication threads than cores (several ranks per node,
 * or compute threads beside them) spinning threads starve the very peers they
 * wait for. A wait yields the core between polls from the first (sched_yield
 * costs a system call when no other thread is runnable, and hands the core over
 * when one is) for MLC_SPIN_SECONDS (most messages land by then), then sleeps
 * between polls, each sleep a tenth of the time waited so far, at most
 * MLC_MAX_SLEEP_SECONDS: a late peer then costs a few wake-ups per millisecond
 * instead of a core, and the sleep adds at most a tenth to a wait. Polls back to
 * back without a yield first (64 of them, a few microseconds on an idle core) made
 * every message wait longer where a peer shares the core: 3 and 4 test-bed nodes
 * on 2 cores took 119-120 us for an 8-byte direct allreduce and 181-309 us for an
 * 8-byte allgather, 75 and 135-192 us without (2 nodes, a core each: 14-15 and 28
 * us either way). Every poll calls the progress hook (the stall watchdog). Posting
 * and the blocking calls built on these waits are in post.c.
 *
 * A transport that never sleeps (the caller's, for blocking collectives) keeps
 * yielding instead: its thread has nothing else to do, and over TCP an MPI library
 * moves bytes only while it is polled, so a sleep of a tenth of the wait idles the
 * link for that long (2 test-bed nodes, 1-4 MiB allgather and reduce-scatter:
 * 0.95-0.97 of MPI's speed with sleeps, 0.98-1.00 without). */
#include <sched.h>
#include <time.h>

#include "transport.h"

#define MLC_SPIN_SECONDS 100e-6
#define MLC_MAX_SLEEP_SECONDS 1e-3
/* Clock reads are not free: the spin looks at the clock every this many polls, from
 * the this-many-th (a wait that ends sooner reads none; the spin's time counts from
 * there, a few microseconds late). */
#define MLC_POLLS_PER_CLOCK 16

/* Between two polls of a wait whose clock started at *start (0: not yet read). */
static void poll_once(mlc_tp *tp, int64_t poll, double *start) {
    if (tp->progress) tp->progress(tp->progress_arg, tp, poll);
    if (poll == 0 || poll % MLC_POLLS_PER_CLOCK || tp->never_sleeps) {
        sched_yield();
        return;
    }
    double now = mlc_now();
    if (*start == 0) *start = now;
    double waited = now - *start;
    if (waited < MLC_SPIN_SECONDS) {
        sched_yield();
        return;
    }
    double pause = waited / 10 < MLC_MAX_SLEEP_SECONDS ? waited / 10 : MLC_MAX_SLEEP_SECONDS;
    struct timespec ts = {0, (long)(pause * 1e9)};
    nanosleep(&ts, NULL);
}

int mlc_tp_waitall(mlc_tp *tp, int n, mlc_tp_req *reqs) {
    int done = 0, rc;
    int64_t poll = 0;
    double start = 0;
    while ((rc = tp->ops->testall(tp, n, reqs, &done)) == MLC_OK && !done) poll_once(tp, poll++, &start);
    if (rc == MLC_OK) tp->recv_peer = tp->send_peer = -1; /* nothing pending now */
    return rc;
}

int mlc_tp_waitany(mlc_tp *tp, int n, mlc_tp_req *reqs, int *index) {
    int rc;
    int64_t poll = 0;
    double start = 0;
    while ((rc = tp->ops->testany(tp, n, reqs, index)) == MLC_OK && *index == -1)
        poll_once(tp, poll++, &start);
    return rc;
}
