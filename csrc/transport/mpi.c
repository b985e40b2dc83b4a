/* Point-to-point transport over MPI: the only file that sends or receives.
 * Byte counts go through the MPI-4 large-count (_c) calls so a buffer above
 * 2 GiB is not truncated; an MPI before 4 (Open MPI 4.1 and 5.0) has none, and
 * there a message above INT_MAX bytes travels as one message of a derived type
 * (see post_isend below). The communicator is the calling thread's own dup, so
 * messages of different threads never meet. The tag is the segment's number, so
 * that should two ranks ever disagree on a schedule, MPI reports a mismatch
 * instead of pairing one segment's bytes with another's. */
#include <limits.h>
#include <sched.h>
#include <stdio.h>

#include "checks.h"

int mlc_mpi_error(char *message, int mpi_code, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpi_code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", mpi_code);
    if (message) snprintf(message, MLC_MSG_LEN, "%s failed: %.200s", what, text);
    return MLC_ERR_MPI;
}

#define CHECK(call, what, x)                                        \
    do {                                                            \
        int rc_ = (call);                                           \
        if (rc_ != MPI_SUCCESS) return mlc_mpi_error((x)->message, rc_, what); \
    } while (0)

/* Waits poll and yield instead of blocking in MPI: a blocked MPI call spins,
 * and with more communication threads than cores (several ranks per node, or
 * compute threads beside them) spinning threads starve the very peers they wait
 * for. sched_yield costs nothing when no other thread is runnable. Polling is
 * also where the stall watchdog (watchdog.c) looks at the clock. */
static int wait_all(const mlc_xfer *x, int n, MPI_Request *reqs, const char *what) {
    int done = 0;
    mlc_stall stall = {0};
    for (;;) {
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mlc_mpi_error(x->message, rc, what);
        if (done) break;
        if (x->watch) mlc_watch_poll(x->watch, &stall);
        sched_yield();
    }
    if (x->watch) x->watch->recv_peer = x->watch->send_peer = -1; /* nothing pending now */
    return MLC_OK;
}

/* MLC_NO_LARGE_COUNT: a core compiled against MPI-4 headers (the mpich wheel's) that must
 * also run on an MPI-3 library of the same ABI (Cray MPICH 8, MVAPICH2). */
#if MPI_VERSION >= 4 && !defined(MLC_NO_LARGE_COUNT)
static int post_isend(const void *buf, int64_t bytes, int dest, int tag, MPI_Comm comm,
                      MPI_Request *req) {
    return MPI_Isend_c(buf, (MPI_Count)bytes, MPI_BYTE, dest, tag, comm, req);
}

static int post_irecv(void *buf, int64_t bytes, int src, int tag, MPI_Comm comm,
                      MPI_Request *req) {
    return MPI_Irecv_c(buf, (MPI_Count)bytes, MPI_BYTE, src, tag, comm, req);
}
#else
/* Without large counts, `bytes` above INT_MAX become one element of a struct type:
 * q blocks of 1 GiB, then the rest. It stays one message, so the caller keeps one
 * request per transfer and matching order per tag is MPI's own; pieces sent as
 * separate messages would need as many requests and rely on every piece being
 * posted in the same order on both sides. The type is freed at once: MPI keeps it
 * alive until the transfer ends. */
#ifndef MLC_INT_COUNT_LIMIT /* a test build shrinks both to take this path with small messages */
#define MLC_INT_COUNT_LIMIT INT_MAX
#endif
#ifndef MLC_SPLIT_BLOCK_BYTES
#define MLC_SPLIT_BLOCK_BYTES (1 << 30)
#endif
static int byte_type(int64_t bytes, MPI_Datatype *type, int *count) {
    *type = MPI_BYTE; /* also what a failure below leaves: nothing for the caller to free */
    *count = (int)bytes;
    if (bytes <= MLC_INT_COUNT_LIMIT) return MPI_SUCCESS;
    const int64_t block = MLC_SPLIT_BLOCK_BYTES;
    MPI_Datatype gib;
    int rc = MPI_Type_contiguous((int)block, MPI_BYTE, &gib);
    if (rc != MPI_SUCCESS) return rc;
    int lengths[2] = {(int)(bytes / block), (int)(bytes % block)};
    MPI_Aint offsets[2] = {0, (MPI_Aint)(bytes / block * block)};
    MPI_Datatype types[2] = {gib, MPI_BYTE};
    rc = MPI_Type_create_struct(2, lengths, offsets, types, type);
    MPI_Type_free(&gib);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(type);
    *count = 1;
    return rc;
}

static int post_isend(const void *buf, int64_t bytes, int dest, int tag, MPI_Comm comm,
                      MPI_Request *req) {
    MPI_Datatype type;
    int count, rc = byte_type(bytes, &type, &count);
    if (rc == MPI_SUCCESS) rc = MPI_Isend(buf, count, type, dest, tag, comm, req);
    if (type != MPI_BYTE) MPI_Type_free(&type);
    return rc;
}

static int post_irecv(void *buf, int64_t bytes, int src, int tag, MPI_Comm comm,
                      MPI_Request *req) {
    MPI_Datatype type;
    int count, rc = byte_type(bytes, &type, &count);
    if (rc == MPI_SUCCESS) rc = MPI_Irecv(buf, count, type, src, tag, comm, req);
    if (type != MPI_BYTE) MPI_Type_free(&type);
    return rc;
}
#endif

int mlc_tp_isend(const mlc_xfer *x, const void *buf, int64_t bytes, int dest, int tag,
                 MPI_Request *req) {
    CHECK(post_isend(buf, bytes, dest, tag, x->comm, req), "MPI_Isend", x);
    if (x->watch) x->watch->send_peer = dest;
    return MLC_OK;
}

int mlc_tp_irecv(const mlc_xfer *x, void *buf, int64_t bytes, int src, int tag, MPI_Request *req) {
    CHECK(post_irecv(buf, bytes, src, tag, x->comm, req), "MPI_Irecv", x);
    if (x->watch) x->watch->recv_peer = src;
    return MLC_OK;
}

int mlc_tp_sendrecv(const mlc_xfer *x, const void *sbuf, int64_t sbytes, int dest,
                    void *rbuf, int64_t rbytes, int src, int tag) {
    MPI_Request reqs[2];
    int rc;
    if ((rc = mlc_tp_irecv(x, rbuf, rbytes, src, tag, &reqs[0]))) return rc;
    if ((rc = mlc_tp_isend(x, sbuf, sbytes, dest, tag, &reqs[1]))) return rc;
    return wait_all(x, 2, reqs, "MPI_Sendrecv");
}

int mlc_tp_send(const mlc_xfer *x, const void *buf, int64_t bytes, int dest, int tag) {
    MPI_Request req;
    int rc = mlc_tp_isend(x, buf, bytes, dest, tag, &req);
    return rc ? rc : wait_all(x, 1, &req, "MPI_Send");
}

int mlc_tp_recv(const mlc_xfer *x, void *buf, int64_t bytes, int src, int tag) {
    MPI_Request req;
    int rc = mlc_tp_irecv(x, buf, bytes, src, tag, &req);
    return rc ? rc : wait_all(x, 1, &req, "MPI_Recv");
}

int mlc_tp_waitany(const mlc_xfer *x, int n, MPI_Request *reqs, int *index) {
    int flag = 0;
    mlc_stall stall = {0};
    for (;;) {
        int rc = MPI_Testany(n, reqs, index, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mlc_mpi_error(x->message, rc, "MPI_Testany");
        if (flag) return MLC_OK;
        if (x->watch) mlc_watch_poll(x->watch, &stall);
        sched_yield();
    }
}

int mlc_tp_waitall(const mlc_xfer *x, int n, MPI_Request *reqs) {
    return wait_all(x, n, reqs, "MPI_Waitall");
}
