/* A stand-in for the CUDA driver (libcuda.so.1) over host memory, for the CPU suite: the
 * device-buffer path (csrc/cuda/, csrc/team/staged.c) runs its real code against it where
 * no GPU is. "Device" memory comes from fake_cuda_alloc and is known to cuPointerGetAttribute
 * as device memory of the ordinal asked for; everything else is unknown memory, as plain
 * host memory is to CUDA.
 *
 * Copies are asynchronous as on a GPU, only more so: a copy runs when its stream is waited
 * for (cuStreamSynchronize, cuEventSynchronize of a later event, a stream waiting on such an
 * event), never at once. A caller that reads a host slot before waiting for its download,
 * or reuses a slot before its upload ran, sees stale bytes, and the exact tests fail.
 *
 * Faults: fake_cuda_fail_copy(n) fails the n-th copy from then on (1: the next) with
 * CUDA_ERROR_ILLEGAL_ADDRESS.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, NO_DEVICE = 100, ILLEGAL_ADDRESS = 700 };

typedef struct region {
    char *base;
    size_t bytes;
    int type; /* 1 host (cuMemHostAlloc), 2 device */
    int ordinal;
    struct region *next;
} region;

typedef struct op {
    int kind; /* 0 copy, 1 record event, 2 wait for event */
    void *dst;
    const void *src;
    size_t bytes;
    struct event *event;
    struct op *next;
} op;

typedef struct stream {
    op *head, *tail;
} stream;

typedef struct event {
    stream *on;   /* the stream it was last recorded on; NULL: complete */
    op *marker;   /* its record operation in that stream */
    double when;  /* seconds, when it completed */
} event;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static region *regions;
static long copies_made, failing_copy = -1;
static __thread void *current_ctx;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static region *find(const void *ptr) {
    for (region *r = regions; r; r = r->next)
        if ((const char *)ptr >= r->base && (const char *)ptr < r->base + r->bytes) return r;
    return NULL;
}

/* Test entry points: device memory of a device, and its release. */
void *fake_cuda_alloc(size_t bytes, int ordinal) {
    region *r = calloc(1, sizeof *r);
    r->base = calloc(1, bytes ? bytes : 1);
    r->bytes = bytes ? bytes : 1;
    r->type = 2;
    r->ordinal = ordinal;
    pthread_mutex_lock(&lock);
    r->next = regions;
    regions = r;
    pthread_mutex_unlock(&lock);
    return r->base;
}

static void forget(void *ptr) {
    pthread_mutex_lock(&lock);
    for (region **p = &regions; *p; p = &(*p)->next)
        if ((*p)->base == ptr) {
            region *r = *p;
            *p = r->next;
            free(r->base);
            free(r);
            break;
        }
    pthread_mutex_unlock(&lock);
}

void fake_cuda_free(void *ptr) { forget(ptr); }

void fake_cuda_fail_copy(long n) {
    pthread_mutex_lock(&lock);
    failing_copy = copies_made + n;
    pthread_mutex_unlock(&lock);
}

static void run_until(stream *s, op *last);

static void run_op(stream *s, op *o) {
    if (o->kind == 0) memcpy(o->dst, o->src, o->bytes);
    else if (o->kind == 1) {
        if (o->event->marker == o) {
            o->event->on = NULL;
            o->event->marker = NULL;
            o->event->when = now();
        }
    } else if (o->event->on) {
        run_until(o->event->on, o->event->marker);
    }
    (void)s;
}

/* Run a stream's operations up to and including `last` (NULL: all). */
static void run_until(stream *s, op *last) {
    while (s->head) {
        op *o = s->head;
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        run_op(s, o);
        free(o);
        if (o == last) break;
    }
}

static void push(stream *s, op *o) {
    o->next = NULL;
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
}

CUresult cuInit(unsigned int flags) { return (void)flags, OK; }
CUresult cuDeviceGet(int *device, int ordinal) {
    *device = ordinal;
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) {
    *ctx = (void *)(uintptr_t)(0x1000 + device);
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int device) { return (void)device, OK; }
CUresult cuCtxGetCurrent(void **ctx) {
    *ctx = current_ctx;
    return OK;
}
CUresult cuCtxSetCurrent(void *ctx) {
    current_ctx = ctx;
    return OK;
}
CUresult cuPointerGetAttribute(void *data, int attribute, uint64_t ptr) {
    pthread_mutex_lock(&lock);
    region *r = find((const void *)(uintptr_t)ptr);
    pthread_mutex_unlock(&lock);
    if (!r) return INVALID_VALUE;
    if (attribute == 2) *(unsigned int *)data = (unsigned int)r->type;
    else if (attribute == 9) *(int *)data = r->ordinal;
    else return INVALID_VALUE;
    return OK;
}
CUresult cuMemHostAlloc(void **ptr, size_t bytes, unsigned int flags) {
    (void)flags;
    *ptr = fake_cuda_alloc(bytes, 0);
    pthread_mutex_lock(&lock);
    find(*ptr)->type = 1;
    pthread_mutex_unlock(&lock);
    return OK;
}
CUresult cuMemFreeHost(void *ptr) {
    forget(ptr);
    return OK;
}
CUresult cuStreamCreate(stream **s, unsigned int flags) {
    (void)flags;
    *s = calloc(1, sizeof **s);
    return OK;
}
CUresult cuStreamDestroy_v2(stream *s) {
    run_until(s, NULL);
    free(s);
    return OK;
}
/* Streams 0, 1 and 2 (legacy, per-thread) hold no work of the fake's. */
static int real(stream *s) { return (uintptr_t)s > 2; }
CUresult cuStreamSynchronize(stream *s) {
    if (real(s)) run_until(s, NULL);
    return OK;
}
CUresult cuEventCreate(event **e, unsigned int flags) {
    (void)flags;
    *e = calloc(1, sizeof **e);
    return OK;
}
CUresult cuEventDestroy_v2(event *e) {
    if (e->on) run_until(e->on, e->marker);
    free(e);
    return OK;
}
CUresult cuEventRecord(event *e, stream *s) {
    if (!real(s)) {
        e->on = NULL;
        e->marker = NULL;
        e->when = now();
        return OK;
    }
    op *o = calloc(1, sizeof *o);
    o->kind = 1;
    o->event = e;
    e->on = s;
    e->marker = o;
    push(s, o);
    return OK;
}
CUresult cuStreamWaitEvent(stream *s, event *e, unsigned int flags) {
    (void)flags;
    if (!e->on || !real(s)) return OK;
    op *o = calloc(1, sizeof *o);
    o->kind = 2;
    o->event = e;
    push(s, o);
    return OK;
}
CUresult cuEventSynchronize(event *e) {
    if (e->on) run_until(e->on, e->marker);
    return OK;
}
CUresult cuEventElapsedTime(float *ms, event *start, event *end) {
    if (start->on || end->on) return 600; /* CUDA_ERROR_NOT_READY */
    *ms = (float)((end->when - start->when) * 1e3);
    return OK;
}

static CUresult copy(void *dst, const void *src, size_t bytes, stream *s) {
    pthread_mutex_lock(&lock);
    const int fails = ++copies_made == failing_copy;
    pthread_mutex_unlock(&lock);
    if (fails) return ILLEGAL_ADDRESS;
    op *o = calloc(1, sizeof *o);
    o->dst = dst;
    o->src = src;
    o->bytes = bytes;
    if (real(s)) push(s, o);
    else {
        memcpy(dst, src, bytes);
        free(o);
    }
    return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t bytes, stream *s) {
    return copy(dst, (const void *)(uintptr_t)src, bytes, s);
}
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t bytes, stream *s) {
    return copy((void *)(uintptr_t)dst, src, bytes, s);
}
CUresult cuGetErrorName(CUresult error, const char **name) {
    *name = error == ILLEGAL_ADDRESS ? "CUDA_ERROR_ILLEGAL_ADDRESS"
            : error == NO_DEVICE     ? "CUDA_ERROR_NO_DEVICE"
            : error == INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE"
                                     : "CUDA_ERROR_UNKNOWN";
    return OK;
}
