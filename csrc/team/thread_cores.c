/* The cores a team's threads run on (ML_COMM_THREAD_CORES), and the threads' names.
 *
 * Why: a communication thread that shares a core with compute takes time from it
 * whenever it wakes to move bytes. HPC practice leaves a node's last cores to
 * communication: the launcher keeps compute off them (srun --cpu-bind, taskset) and the
 * communication threads are put on them here.
 *
 * How: every thread of the team gets the whole list (pthread_setaffinity_np), and the
 * kernel places the threads within it: a team with more threads than cores listed
 * shares them the way the scheduler sees fit, as any thread on a set of cores does, and
 * no thread waits on a core that another keeps busy while a listed one idles. The caller
 * (Python) checks the list against the process's allowed cores first, so a list the
 * kernel refuses is rare; it still fails the call (at the first thread: every thread gets
 * the same set, so the kernel refuses it for all or for none). Threads are
 * named "ml_comm-w<i>" so that top -H, ps -L and /proc/<pid>/task/<tid>/comm show them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

#include "team.h"

#ifdef __linux__
int mlc_thread_set_cores(pthread_t thread, const int *cores, int ncores) {
    if (!cores || ncores < 1) return MLC_ERR_ARG;
    int highest = 0;
    for (int i = 0; i < ncores; i++) {
        if (cores[i] < 0) return MLC_ERR_ARG;
        if (cores[i] > highest) highest = cores[i];
    }
    /* A set sized for the highest core: machines may have more than CPU_SETSIZE (1024). */
    cpu_set_t *set = CPU_ALLOC(highest + 1);
    if (!set) return MLC_ERR_NOMEM;
    size_t bytes = CPU_ALLOC_SIZE(highest + 1);
    CPU_ZERO_S(bytes, set);
    for (int i = 0; i < ncores; i++) CPU_SET_S(cores[i], bytes, set);
    int rc = pthread_setaffinity_np(thread, bytes, set);
    CPU_FREE(set);
    if (rc == 0) return MLC_OK;
    return rc == EINVAL ? MLC_ERR_ARG : MLC_ERR_STATE;
}

void mlc_thread_name_self(int index) {
    char name[16]; /* Linux keeps 15 characters */
    snprintf(name, sizeof name, "ml_comm-w%d", index);
    pthread_setname_np(pthread_self(), name);
}
#else
int mlc_thread_set_cores(pthread_t thread, const int *cores, int ncores) { return MLC_ERR_STATE; }
void mlc_thread_name_self(int index) {}
#endif
