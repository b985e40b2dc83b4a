/* Internal declarations shared by the core's files. Not part of the public API. */
#ifndef MLC_CORE_H
#define MLC_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <mpi.h>

#include "ml_comm.h"

#define MLC_VERSION "0.1.0"
/* Room for a mismatch message that lists what each group of ranks submitted. */
#define MLC_MSG_LEN 512

struct mlc_context {
    MPI_Comm comm; /* dup of the user's communicator; teams dup it again */
    int rank;
    int size;
};

/* What an algorithm needs to move bytes: one communicator used by one thread. */
typedef struct mlc_xfer {
    MPI_Comm comm;
    int rank;
    int size;
    int dtype;
    int elem_size;
    char *scratch; /* receive staging owned by the calling thread */
    int64_t scratch_bytes;
    char *message; /* MLC_MSG_LEN bytes for an error text */
    struct mlc_watch *watch; /* stall watchdog of the calling thread (checks.h); may be NULL */
} mlc_xfer;

/* A contiguous piece of the reduction that one algorithm call works on. */
typedef struct mlc_segment {
    char *data;
    int64_t count;
    int tag; /* MPI tag of its messages: see transport/mpi.c */
} mlc_segment;

/* Tags are segment numbers modulo this (the MPI standard's smallest MPI_TAG_UB). */
#define MLC_TAG_SPACE 32768

/* ---- reduce.c: element-wise kernels ---- */
void mlc_reduce_sum_into(void *dst, const void *src, int64_t n, int dtype);
void mlc_divide_by_ranks(void *buf, int64_t n, int dtype, int nranks);

/* ---- transport/mpi.c: the only point-to-point MPI calls ---- */
int mlc_tp_sendrecv(const mlc_xfer *x, const void *sbuf, int64_t sbytes, int dest,
                    void *rbuf, int64_t rbytes, int src, int tag);
int mlc_tp_send(const mlc_xfer *x, const void *buf, int64_t bytes, int dest, int tag);
int mlc_tp_recv(const mlc_xfer *x, void *buf, int64_t bytes, int src, int tag);
int mlc_tp_isend(const mlc_xfer *x, const void *buf, int64_t bytes, int dest, int tag,
                 MPI_Request *req);
int mlc_tp_irecv(const mlc_xfer *x, void *buf, int64_t bytes, int src, int tag, MPI_Request *req);
int mlc_tp_waitany(const mlc_xfer *x, int n, MPI_Request *reqs, int *index);
int mlc_tp_waitall(const mlc_xfer *x, int n, MPI_Request *reqs);
int mlc_mpi_error(char *message, int mpi_code, const char *what);

/* ---- algos ---- */
/* Ring over a batch of segments at once so one segment's transfer overlaps
 * another's reduction; scratch must hold nseg blocks of ceil(count/size). */
int mlc_allreduce_ring(const mlc_xfer *x, const mlc_segment *segs, int nseg, int op);
int64_t mlc_allreduce_ring_scratch_bytes(int64_t seg_elems, int size, int elem_size, int nseg);
int mlc_allreduce_recursive_doubling(const mlc_xfer *x, char *buf, int64_t count, int op, int tag);
int mlc_broadcast_binomial(const mlc_xfer *x, char *buf, int64_t bytes, int root, int tag);

/* ---- time ---- */
double mlc_now(void);

#endif
