/* Timeline: a fixed array of events that threads claim slots in with one atomic
 * add, so recording costs no lock and nothing at all when it is off. Python
 * writes the events as a Chrome trace (ML_COMM_TIMELINE). */
#include <stdlib.h>
#include <string.h>

#include "team.h"

int mlc_team_timeline_enable(mlc_team *team, int64_t capacity) {
    if (capacity < 0) return MLC_ERR_ARG;
    /* No request may run while the array changes: queued ones record from the
     * team's threads, blocking ones from their caller's (under team->caller.lock). */
    pthread_mutex_lock(&team->caller.lock);
    pthread_mutex_lock(&team->lock);
    int busy = team->head != NULL;
    if (!busy) {
        free(team->timeline.events);
        team->timeline.events = capacity ? calloc(capacity, sizeof *team->timeline.events) : NULL;
        team->timeline.capacity = team->timeline.events ? capacity : 0;
        atomic_store(&team->timeline.used, 0);
    }
    pthread_mutex_unlock(&team->lock);
    pthread_mutex_unlock(&team->caller.lock);
    if (busy) return MLC_ERR_STATE;
    return capacity && !team->timeline.events ? MLC_ERR_NOMEM : MLC_OK;
}

void mlc_timeline_record(mlc_team *team, int kind, int thread, int64_t request, int64_t detail,
                         int64_t bytes, double start, double end) {
    if (!team->timeline.events) return;
    int64_t slot = atomic_fetch_add(&team->timeline.used, 1);
    if (slot >= team->timeline.capacity) return; /* full: later events are dropped */
    mlc_event *e = &team->timeline.events[slot];
    e->start = start;
    e->end = end;
    e->kind = kind;
    e->thread = thread;
    e->request = request;
    e->detail = detail;
    e->bytes = bytes;
}

int64_t mlc_team_timeline_read(mlc_team *team, mlc_event *out, int64_t max) {
    pthread_mutex_lock(&team->lock);
    int64_t n = atomic_load(&team->timeline.used);
    if (n > team->timeline.capacity) n = team->timeline.capacity;
    if (n > max) n = max;
    if (n > 0) memcpy(out, team->timeline.events, n * sizeof *out);
    pthread_mutex_unlock(&team->lock);
    return n;
}
