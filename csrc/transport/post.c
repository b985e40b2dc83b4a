/* transport.h's calls that do not wait, and the blocking ones made of a post and a
 * wait: they go through the implementation's ops (mpi.c, loopback.c) and keep the
 * peers of the last posts, so that a stalled wait can say whom it waits for. The
 * waits themselves are in wait.c; the scale model (model/transport_simgrid.cpp)
 * links this file with waits of its own that block in simulated time. */
#include "transport.h"

void mlc_tp_set_progress(mlc_tp *tp, mlc_tp_progress fn, void *arg) {
    tp->progress = fn;
    tp->progress_arg = arg;
}

int mlc_tp_isend(mlc_tp *tp, const void *buf, int64_t bytes, int dest, int tag, mlc_tp_req *req) {
    tp->send_peer = dest;
    return tp->ops->isend(tp, buf, bytes, dest, tag, req);
}

int mlc_tp_irecv(mlc_tp *tp, void *buf, int64_t bytes, int src, int tag, mlc_tp_req *req) {
    tp->recv_peer = src;
    return tp->ops->irecv(tp, buf, bytes, src, tag, req);
}

int mlc_tp_testall(mlc_tp *tp, int n, mlc_tp_req *reqs, int *done) {
    return tp->ops->testall(tp, n, reqs, done);
}

void mlc_tp_abandon(mlc_tp *tp, int n, mlc_tp_req *reqs) {
    tp->ops->abandon(tp, n, reqs);
    tp->recv_peer = tp->send_peer = -1;
}

int mlc_tp_sendrecv(mlc_tp *tp, const void *sbuf, int64_t sbytes, int dest, void *rbuf,
                    int64_t rbytes, int src, int tag) {
    mlc_tp_req reqs[2];
    int posted = 0, rc = MLC_OK;
    if (src >= 0 && (rc = mlc_tp_irecv(tp, rbuf, rbytes, src, tag, &reqs[posted])) == MLC_OK) posted++;
    if (rc == MLC_OK && dest >= 0 && (rc = mlc_tp_isend(tp, sbuf, sbytes, dest, tag, &reqs[posted])) == MLC_OK)
        posted++;
    if (rc) {
        mlc_tp_abandon(tp, posted, reqs);
        return rc;
    }
    return mlc_tp_waitall(tp, posted, reqs);
}

int mlc_tp_send(mlc_tp *tp, const void *buf, int64_t bytes, int dest, int tag) {
    mlc_tp_req req;
    int rc = mlc_tp_isend(tp, buf, bytes, dest, tag, &req);
    return rc ? rc : mlc_tp_waitall(tp, 1, &req);
}

int mlc_tp_recv(mlc_tp *tp, void *buf, int64_t bytes, int src, int tag) {
    mlc_tp_req req;
    int rc = mlc_tp_irecv(tp, buf, bytes, src, tag, &req);
    return rc ? rc : mlc_tp_waitall(tp, 1, &req);
}

int mlc_tp_peek(mlc_tp *tp, mlc_tp_req *req) {
    int done = 1;
    tp->ops->peek(tp, req, &done);
    return done;
}
