/* Contexts: one dup of the user's communicator, checked for the thread level
 * the communication threads need. Teams hang off a context. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/mpi_error.h"
#include "team.h"

/* Ends every rank of the job. MPI_COMM_WORLD, not the context's communicator: MPICH
 * aborts any other communicator by sending each of its ranks a message and waiting for
 * it to be delivered, which never happens when the rank it waits for is stopped, or is
 * asleep in the user's code with nothing progressing MPI (the stall this abort ends);
 * on MPI_COMM_WORLD it asks the process manager, which kills every process. */
void mlc_abort_job(void *unused, int exit_code) {
    (void)unused;
    /* The launcher kills every rank as soon as it hears of the abort, and the lines
     * still in its forwarding pipes die with them: give it a moment to pass them on. */
    struct timespec forward = {0, 300 * 1000 * 1000};
    nanosleep(&forward, NULL);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    /* MPICH's MPI_Abort may return once the launcher knows: run nothing more. */
    _exit(exit_code);
}

/* The job's long waits, on a communicator of their own. */
static int open_waits(mlc_context *ctx) {
    int rc = MPI_Comm_dup(ctx->comm, &ctx->waits_comm);
    if (rc != MPI_SUCCESS) {
        ctx->waits_comm = MPI_COMM_NULL;
        return mlc_mpi_error(ctx->waits_message, rc, "MPI_Comm_dup");
    }
    mlc_tp_mpi_open(&ctx->waits_tp, &ctx->waits_comm, ctx->rank, ctx->size, ctx->waits_message);
    ctx->waits = mlc_waits_create(&ctx->waits_tp, mlc_abort_job, NULL);
    return ctx->waits ? MLC_OK : MLC_ERR_NOMEM;
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
    ctx->waits_comm = MPI_COMM_NULL;
    if (ctx->size > 1 && (rc = open_waits(ctx)) != MLC_OK) {
        snprintf(err, errlen, "%s", rc == MLC_ERR_NOMEM ? "out of memory" : ctx->waits_message);
        mlc_context_destroy(ctx);
        return NULL;
    }
    return ctx;
}

void mlc_context_destroy(mlc_context *ctx) {
    int finalized = 0;
    if (!ctx) return;
    MPI_Finalized(&finalized);
    if (!finalized) mlc_waits_destroy(ctx->waits); /* cancels its receives: MPI still works */
    if (!finalized && ctx->waits_comm != MPI_COMM_NULL) {
        mlc_comm_drain(ctx->waits_comm); /* notices no wait of this rank took */
        MPI_Comm_free(&ctx->waits_comm);
    }
    if (!finalized) MPI_Comm_free(&ctx->comm);
    free(ctx);
}

int mlc_context_set_deadlock_limit(mlc_context *ctx, double seconds) {
    if (!ctx || seconds < 0) return MLC_ERR_ARG;
    mlc_waits_set_limit(ctx->waits, seconds);
    return MLC_OK;
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
