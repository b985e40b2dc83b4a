/* Contexts: one dup of the user's communicator, checked for the thread level
 * the communication threads need. Teams hang off a context. */
#include <stdio.h>
#include <stdlib.h>

#include "base/mpi_error.h"
#include "team.h"

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
