/* Contexts: one dup of the user's communicator, checked for the thread level
 * the communication threads need. Also the small helpers with no other home. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core.h"

const char *mlc_version(void) { return MLC_VERSION; }

const char *mlc_status_name(int status) {
    switch (status) {
    case MLC_OK: return "ok";
    case MLC_ERR_ARG: return "invalid argument";
    case MLC_ERR_NOMEM: return "out of memory";
    case MLC_ERR_MPI: return "MPI error";
    case MLC_ERR_THREAD_LEVEL: return "MPI is not initialised with MPI_THREAD_MULTIPLE";
    case MLC_ERR_STATE: return "object is shut down";
    case MLC_PENDING: return "pending";
    case MLC_ERR_MISMATCH: return "ranks disagree on the request";
    case MLC_ERR_NONFINITE: return "NaN or Inf in the input";
    default: return "unknown status";
    }
}

int mlc_dtype_size(int dtype) {
    static const int sizes[MLC_NUM_DTYPES] = {4, 8, 2, 2, 4, 8};
    return dtype >= 0 && dtype < MLC_NUM_DTYPES ? sizes[dtype] : 0;
}

double mlc_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

mlc_context *mlc_context_create(uintptr_t comm_handle_address, char *err, size_t errlen) {
    int initialized = 0, finalized = 0, level = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) {
        snprintf(err, errlen, "MPI is %s; initialise it first (ml_comm.init_mpi())",
                 finalized ? "already finalized" : "not initialised");
        return NULL;
    }
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
        snprintf(err, errlen,
                 "MPI was initialised with thread level %d, but ml_comm's communication threads need "
                 "MPI_THREAD_MULTIPLE (%d); initialise MPI through ml_comm.init_mpi() or mpi4py's default",
                 level, MPI_THREAD_MULTIPLE);
        return NULL;
    }
    mlc_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int rc = MPI_Comm_dup(*(MPI_Comm *)comm_handle_address, &ctx->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(ctx->comm, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        char msg[MLC_MSG_LEN];
        mlc_mpi_error(msg, rc, "MPI_Comm_dup");
        snprintf(err, errlen, "%s", msg);
        free(ctx);
        return NULL;
    }
    MPI_Comm_rank(ctx->comm, &ctx->rank);
    MPI_Comm_size(ctx->comm, &ctx->size);
    return ctx;
}

void mlc_context_destroy(mlc_context *ctx) {
    int finalized = 0;
    if (!ctx) return;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&ctx->comm);
    free(ctx);
}

int mlc_context_rank(const mlc_context *ctx) { return ctx->rank; }
int mlc_context_size(const mlc_context *ctx) { return ctx->size; }

int mlc_context_barrier(mlc_context *ctx) {
    return MPI_Barrier(ctx->comm) == MPI_SUCCESS ? MLC_OK : MLC_ERR_MPI;
}

const char *mlc_mpi_library_version(char *buf, size_t len) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(text, &n);
    snprintf(buf, len, "%s", text);
    return buf;
}
