/* The time slice a thread asks Linux's scheduler for (the team's communication threads).
 *
 * Why: where a communication thread shares a core with compute (a node's cores all
 * running TensorFlow, or a test-bed node's one core), it wakes every millisecond or less
 * to poll MPI, which over TCP moves bytes only while it is polled. With the kernel's
 * default slice (EEVDF, Linux 6.6 and later: 0.7 ms times 1 + log2 of the cores) the
 * woken thread waits until the compute thread's slice ends, and the reduction crawls
 * behind backprop: on 2 test-bed nodes (batch 8, pipelined), a batch of 2 MiB of segments took
 * 40-53 ms while the next step computed and 9 ms once it had finished. A short slice
 * gives the woken thread an earlier deadline, so it runs when it wakes and sleeps again.
 *
 * How: sched_setattr's sched_runtime, which Linux 6.12 and later take as the slice of an
 * ordinary thread (clamped to 0.1-100 ms; 0: the kernel's default again). Earlier
 * kernels ignore it for ordinary threads. Only a thread under SCHED_OTHER or SCHED_BATCH is
 * changed, with its policy and nice value kept, so nothing needs a privilege. */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base.h"

#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
/* The kernel's struct sched_attr (include/uapi/linux/sched/types.h), as of its first size
 * (48 bytes: enough for sched_runtime); glibc has no wrapper before 2.41. */
typedef struct {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
} kernel_sched_attr;

enum { POLICY_OTHER = 0, POLICY_BATCH = 3 };

int mlc_thread_request_slice(int64_t ns) {
    kernel_sched_attr attr = {0};
    if (ns < 0) return MLC_ERR_ARG;
    if (syscall(SYS_sched_getattr, 0, &attr, (unsigned)sizeof attr, 0) != 0) return MLC_ERR_STATE;
    if (attr.sched_policy != POLICY_OTHER && attr.sched_policy != POLICY_BATCH) return MLC_ERR_STATE;
    attr.size = sizeof attr;
    attr.sched_flags = 0;
    attr.sched_runtime = (uint64_t)ns;
    return syscall(SYS_sched_setattr, 0, &attr, 0) == 0 ? MLC_OK : MLC_ERR_STATE;
}
#else
int mlc_thread_request_slice(int64_t ns) { return ns < 0 ? MLC_ERR_ARG : MLC_ERR_STATE; }
#endif
