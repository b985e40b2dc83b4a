/* Point-to-point transport over MPI: the only file that sends or receives with
 * MPI. Byte counts go through the MPI-4 large-count (_c) calls so a buffer above
 * 2 GiB is not truncated. The communicator is the calling thread's own dup, so
 * messages of different threads never meet. The tag is the segment's number, so
 * that should two ranks ever disagree on a schedule, MPI reports a mismatch
 * instead of pairing one segment's bytes with another's. */
#include <string.h>

#include "base/mpi_error.h"
#include "mpi.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(mlc_tp_req), "an MPI_Request fits an mlc_tp_req");

/* Requests are tested many at a time; MPI wants them in an array of its own type. */
#define MLC_MPI_MAX_BATCH 64

static MPI_Comm comm_of(const mlc_tp *tp) { return *(MPI_Comm *)tp->impl; }

static MPI_Request *handle(mlc_tp_req *req) { return (MPI_Request *)req->opaque; }

static int mpi_isend(mlc_tp *tp, const void *buf, int64_t bytes, int dest, int tag, mlc_tp_req *req) {
    int rc = MPI_Isend_c(buf, bytes, MPI_BYTE, dest, tag, comm_of(tp), handle(req));
    return rc == MPI_SUCCESS ? MLC_OK : mlc_mpi_error(tp->message, rc, "MPI_Isend");
}

static int mpi_irecv(mlc_tp *tp, void *buf, int64_t bytes, int src, int tag, mlc_tp_req *req) {
    int rc = MPI_Irecv_c(buf, bytes, MPI_BYTE, src, tag, comm_of(tp), handle(req));
    return rc == MPI_SUCCESS ? MLC_OK : mlc_mpi_error(tp->message, rc, "MPI_Irecv");
}

static void load(int n, mlc_tp_req *reqs, MPI_Request *out) {
    for (int i = 0; i < n; i++) out[i] = *handle(&reqs[i]);
}

static void store(int n, const MPI_Request *in, mlc_tp_req *reqs) {
    for (int i = 0; i < n; i++) *handle(&reqs[i]) = in[i];
}

static int mpi_testall(mlc_tp *tp, int n, mlc_tp_req *reqs, int *done) {
    MPI_Request r[MLC_MPI_MAX_BATCH];
    if (n > MLC_MPI_MAX_BATCH) return MLC_ERR_ARG;
    load(n, reqs, r);
    int rc = MPI_Testall(n, r, done, MPI_STATUSES_IGNORE);
    store(n, r, reqs);
    return rc == MPI_SUCCESS ? MLC_OK : mlc_mpi_error(tp->message, rc, "MPI_Testall");
}

static int mpi_testany(mlc_tp *tp, int n, mlc_tp_req *reqs, int *index) {
    MPI_Request r[MLC_MPI_MAX_BATCH];
    int flag = 0, i = MPI_UNDEFINED;
    if (n > MLC_MPI_MAX_BATCH) return MLC_ERR_ARG;
    load(n, reqs, r);
    int rc = MPI_Testany(n, r, &i, &flag, MPI_STATUS_IGNORE);
    store(n, r, reqs);
    if (rc != MPI_SUCCESS) return mlc_mpi_error(tp->message, rc, "MPI_Testany");
    *index = !flag ? -1 : i == MPI_UNDEFINED ? -2 : i;
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
