/* Point-to-point transport over MPI: the only file that sends or receives with
 * MPI. Byte counts go through the MPI-4 large-count (_c) calls so a buffer above
 * 2 GiB is not truncated; an MPI before 4 (Open MPI 4.1 and 5.0) has none, and
 * there a message above INT_MAX bytes travels as one message of a derived type
 * (see post_isend below). The communicator is the calling thread's own dup, so
 * messages of different threads never meet. The tag is the segment's number, so
 * that should two ranks ever disagree on a schedule, MPI reports a mismatch
 * instead of pairing one segment's bytes with another's. */
#include <limits.h>
#include <string.h>

#include "base/mpi_error.h"
#include "mpi.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(mlc_tp_req), "an MPI_Request fits an mlc_tp_req");

/* Requests are tested many at a time, MPI wants them in an array of its own type, and
 * that array lives on the stack: a call tests them this many at a time, window after
 * window, so that no number of outstanding requests is refused (the agreement's
 * table after a disagreement waits on 2 (n - 1) at once). */
#define MLC_MPI_WINDOW 64

static MPI_Comm comm_of(const mlc_tp *tp) { return *(MPI_Comm *)tp->impl; }

static MPI_Request *handle(mlc_tp_req *req) { return (MPI_Request *)req->opaque; }

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

static int mpi_isend(mlc_tp *tp, const void *buf, int64_t bytes, int dest, int tag, mlc_tp_req *req) {
    int rc = post_isend(buf, bytes, dest, tag, comm_of(tp), handle(req));
    return rc == MPI_SUCCESS ? MLC_OK : mlc_mpi_error(tp->message, rc, "MPI_Isend");
}

static int mpi_irecv(mlc_tp *tp, void *buf, int64_t bytes, int src, int tag, mlc_tp_req *req) {
    int rc = post_irecv(buf, bytes, src, tag, comm_of(tp), handle(req));
    return rc == MPI_SUCCESS ? MLC_OK : mlc_mpi_error(tp->message, rc, "MPI_Irecv");
}

static void load(int n, mlc_tp_req *reqs, MPI_Request *out) {
    for (int i = 0; i < n; i++) out[i] = *handle(&reqs[i]);
}

static void store(int n, const MPI_Request *in, mlc_tp_req *reqs) {
    for (int i = 0; i < n; i++) *handle(&reqs[i]) = in[i];
}

static int mpi_testall(mlc_tp *tp, int n, mlc_tp_req *reqs, int *done) {
    MPI_Request r[MLC_MPI_WINDOW];
    *done = 1;
    for (int first = 0; first < n; first += MLC_MPI_WINDOW) {
        const int count = n - first < MLC_MPI_WINDOW ? n - first : MLC_MPI_WINDOW;
        int window_done = 0;
        load(count, reqs + first, r);
        int rc = MPI_Testall(count, r, &window_done, MPI_STATUSES_IGNORE);
        store(count, r, reqs + first);
        if (rc != MPI_SUCCESS) return mlc_mpi_error(tp->message, rc, "MPI_Testall");
        if (!window_done) *done = 0; /* the later windows still progress */
    }
    return MLC_OK;
}

static int mpi_testany(mlc_tp *tp, int n, mlc_tp_req *reqs, int *index) {
    MPI_Request r[MLC_MPI_WINDOW];
    int active = 0;
    *index = -1;
    for (int first = 0; first < n; first += MLC_MPI_WINDOW) {
        const int count = n - first < MLC_MPI_WINDOW ? n - first : MLC_MPI_WINDOW;
        int flag = 0, i = MPI_UNDEFINED;
        load(count, reqs + first, r);
        int rc = MPI_Testany(count, r, &i, &flag, MPI_STATUS_IGNORE);
        store(count, r, reqs + first);
        if (rc != MPI_SUCCESS) return mlc_mpi_error(tp->message, rc, "MPI_Testany");
        if (flag && i != MPI_UNDEFINED) {
            *index = first + i;
            return MLC_OK;
        }
        active |= !flag; /* flag with MPI_UNDEFINED: none of this window is active */
    }
    if (!active) *index = -2;
    return MLC_OK;
}

static void mpi_abandon(mlc_tp *tp, int n, mlc_tp_req *reqs) {
    for (int i = 0; i < n; i++) {
        MPI_Request *r = handle(&reqs[i]);
        if (*r == MPI_REQUEST_NULL) continue;
        /* Waiting could hang on a peer that is gone: cancel, and free what did not end. */
        int done = 0;
        MPI_Cancel(r);
        MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Request_free(r);
        *r = MPI_REQUEST_NULL;
    }
}

static void mpi_peek(mlc_tp *tp, mlc_tp_req *req, int *done) {
    *done = 1;
    if (*handle(req) != MPI_REQUEST_NULL) MPI_Request_get_status(*handle(req), done, MPI_STATUS_IGNORE);
}

static const mlc_tp_ops mpi_ops = {mpi_isend, mpi_irecv, mpi_testall, mpi_testany, mpi_abandon, mpi_peek};

void mlc_tp_mpi_open(mlc_tp *tp, MPI_Comm *comm, int rank, int size, char *message) {
    memset(tp, 0, sizeof *tp);
    tp->ops = &mpi_ops;
    tp->impl = comm;
    tp->rank = rank;
    tp->size = size;
    tp->message = message;
    tp->recv_peer = tp->send_peer = -1;
}
