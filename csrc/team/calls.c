/* Caller-level calls: where the thread that drives a team stands in its program, which
 * every request of its call carries and the ranks compare (agree/verdict.c's rule).
 *
 * A call's place is counted on entry, before anything can fail: a call that fails on one
 * rank before it reaches the others (an argument only that rank finds wrong, another
 * thread inside the team) still takes its place there, so that the others' matching
 * request is found behind at their next call instead of pairing with another. Marked
 * steps count their calls apart from the unmarked ones, so ranks realigned in one stay
 * aligned in the other. One thread at a time is inside a call on a team; its own calls
 * may nest (they carry the outer call's identity). */
#include <stdio.h>
#include <string.h>

#include "team.h"

int mlc_team_begin_call(mlc_team *team, int64_t step, uint64_t origin, const char *origin_name, char *err,
                        size_t errlen) {
    if (!team || step < 0) return MLC_ERR_ARG;
    const pthread_t me = pthread_self();
    pthread_mutex_lock(&team->lock);
    int64_t index;
    if (step == 0) {
        index = ++team->call.count;
    } else {
        if (step != team->call.step) team->call.step = step, team->call.next = 0;
        index = team->call.next++;
    }
    const int depth = atomic_load_explicit(&team->call.depth, memory_order_acquire);
    if (depth > 0 && !pthread_equal(team->call.thread, me)) {
        if (err && errlen)
            snprintf(err, errlen, "team %d is in use by thread '%s' on this rank: one thread at a time drives a "
                     "team (thread '%s' needs a team of its own: init(nteams=...))", team->agree.dog.team_id,
                     team->call.id.origin_name, origin_name ? origin_name : "");
        pthread_mutex_unlock(&team->lock);
        return MLC_ERR_STATE;
    }
    if (depth == 0) {
        team->call.requests = 0;
        team->call.thread = me;
        team->call.id = (mlc_call_id){step, index, origin, ""};
        /* Copied, cut, without snprintf: this runs on every call (a few microseconds in all at 8 bytes). */
        if (origin_name)
            memcpy(team->call.id.origin_name, origin_name, strnlen(origin_name, sizeof team->call.id.origin_name - 1));
    }
    /* A store, not an increment: nothing else raises the depth outside this lock. */
    atomic_store_explicit(&team->call.depth, depth + 1, memory_order_relaxed);
    pthread_mutex_unlock(&team->lock);
    return MLC_OK;
}

/* Without the lock: only the thread inside the call lowers its depth, and another thread
 * that begins meanwhile reads the depth (under the lock) before or after the store,
 * either being an answer it could get with the lock. Saves a lock pair on every call. */
void mlc_team_end_call(mlc_team *team) {
    if (!team) return;
    const int depth = atomic_load_explicit(&team->call.depth, memory_order_relaxed);
    if (depth > 0 && pthread_equal(team->call.thread, pthread_self()))
        atomic_store_explicit(&team->call.depth, depth - 1, memory_order_release);
}

void mlc_team_caller_waits(mlc_team *team, int delta) {
    if (team && (delta == 1 || delta == -1)) mlc_waits_caller(team->ctx->waits, delta);
}

void mlc_team_forget_call(mlc_team *team) {
    if (!team) return;
    pthread_mutex_lock(&team->lock);
    if (team->call.id.step == 0 && team->call.count > 0) team->call.count--;
    else if (team->call.id.step != 0 && team->call.next > 0) team->call.next--;
    team->call.requests = -1;
    pthread_mutex_unlock(&team->lock);
}

int mlc_team_refuse_call(mlc_team *team, int kind, int64_t tensor, int reason, char *err, size_t errlen) {
    if (!team || kind < MLC_KIND_ALLREDUCE || kind > MLC_KIND_ALLTOALL) return MLC_ERR_ARG;
    pthread_mutex_lock(&team->lock);
    const int depth = atomic_load_explicit(&team->call.depth, memory_order_relaxed);
    const int in_call = depth > 0 && pthread_equal(team->call.thread, pthread_self());
    const int made = team->call.requests;
    pthread_mutex_unlock(&team->lock);
    /* Outside a call of this thread: a framework's front end, whose requests carry no
     * identity either, refusing before it built any op (it alone knows that). */
    if (in_call && (depth != 1 || made != 0)) return MLC_OK;
    const int64_t detail[2] = {tensor, reason};
    if (kind != MLC_KIND_ALLREDUCE && kind != MLC_KIND_BROADCAST)
        return mlc_rows_refuse(team, kind, detail, err, errlen); /* its first request, with no rows */
    return mlc_run_faulted(team, kind, MLC_FLOAT32, MLC_OP_SUM, 0, 0, 1, 0, MLC_BAD_REFUSED, detail, err, errlen);
}

mlc_call_id mlc_call_of(const mlc_team *team) {
    if (atomic_load_explicit(&team->call.depth, memory_order_relaxed) > 0 &&
        pthread_equal(team->call.thread, pthread_self()))
        return team->call.id;
    return (mlc_call_id){0};
}
