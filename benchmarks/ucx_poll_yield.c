/* A preload library for measuring MPICH on an oversubscribed test bed: MPICH's
 * progress loop (ch4:ucx) polls UCX without ever giving up the core, so where two
 * test-bed nodes share a core, a rank that waits could take time from one that works.
 * Preloaded, every UCX poll that moved nothing yields the core, as ml_comm's waits do.
 *
 *   gcc -O2 -shared -fPIC -o /tmp/ucx_poll_yield.so benchmarks/ucx_poll_yield.c -ldl
 *   LD_PRELOAD=/tmp/ucx_poll_yield.so srun ... benchmarks/allreduce.py ...
 *
 * UCX_POLL_YIELD_SAY=1 prints one line per process once the wrapper is in use. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

unsigned ucp_worker_progress(void *worker) {
    static unsigned (*ucx_progress)(void *);
    if (!ucx_progress) {
        /* libucp came with libmpi, which Python opened without RTLD_GLOBAL: ask it by name. */
        void *ucp = dlopen("libucp.so.0", RTLD_NOW | RTLD_NOLOAD);
        ucx_progress = (unsigned (*)(void *))dlsym(ucp, "ucp_worker_progress");
        if (getenv("UCX_POLL_YIELD_SAY")) fprintf(stderr, "ucx_poll_yield: in use\n");
    }
    unsigned events = ucx_progress(worker);
    if (events == 0) sched_yield();
    return events;
}
