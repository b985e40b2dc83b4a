/* The one clock: CLOCK_MONOTONIC seconds, for waits, stats and the timeline. */
#include <time.h>

#include "base.h"

double mlc_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

double mlc_clock(void) { return mlc_now(); }
