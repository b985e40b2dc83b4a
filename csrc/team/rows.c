/* Collectives of rows: allgather (a first dimension that may differ by rank),
 * reduce-scatter and alltoall, as blocking requests on the caller's thread. Each
 * is a request like an allreduce: planned (plan/plan.c picks its kind's row of
 * the table), checked by the agreement before any data moves, then carried out
 * by its algorithm on whole buffers (execute.c).
 *
 * What the agreement compares: kind, dtype, op and the row length always; the
 * total and layout where every rank's sizes are the same (the gathered output,
 * the reduce-scatter's input). Where sizes differ by rank (an allgather's own
 * rows, an alltoall's splits) they are first exchanged by a request of their own,
 * part 1 of the call's 2, so that a rank that called something else fails there,
 * before any rank sizes a buffer from the others' numbers. */
#include <stdio.h>
#include <stdlib.h>

#include "team.h"

int mlc_team_rank(const mlc_team *team) { return team->ctx->rank; }
int mlc_team_size(const mlc_team *team) { return team->ctx->size; }

static int fail(char *err, size_t errlen, const char *what) {
    if (err && errlen) snprintf(err, errlen, "%s", what);
    return MLC_ERR_ARG;
}

static int bad_rows(const mlc_team *team, int64_t row_elements, int dtype) {
    return !team || row_elements < 0 || dtype < 0 || dtype >= MLC_NUM_DTYPES;
}

/* One request: part `part` of the call's nparts, its signed sizes (total elements, or
 * sizes_vary) and what its algorithm moves. */
static int run_rows(mlc_team *team, int kind, int dtype, int op, int part, int nparts, int64_t total,
                    int sizes_vary, int64_t row_elements, const mlc_rows_call *call, char *err,
                    size_t errlen) {
    mlc_tensor tensor = {call->output, call->input, total};
    int64_t starts[2];
    mlc_request req = {0};
    req.tensors = &tensor;
    req.starts = starts;
    mlc_fill_request(&req, team, kind, &tensor, 1, dtype, op, 0, 1);
    req.part = part;
    req.nparts = nparts;
    req.sizes_vary = sizes_vary;
    req.row_elements = row_elements;
    req.rows = *call;
    return mlc_run_blocking(team, &req, err, errlen);
}

int mlc_team_allgather_rows(mlc_team *team, int64_t rows, int64_t row_elements, int dtype,
                            int64_t *all_rows, char *err, size_t errlen) {
    if (bad_rows(team, row_elements, dtype) || rows < 0 || !all_rows)
        return fail(err, errlen, "invalid allgather arguments (rows, row length, dtype or output)");
    const int n = team->ctx->size;
    int64_t *ones = malloc(n * sizeof *ones);
    if (!ones) return MLC_ERR_NOMEM;
    for (int r = 0; r < n; r++) ones[r] = 1;
    const mlc_rows_call call = {MLC_INT64, 8, MLC_OP_SUM, 1, (const char *)&rows, (char *)all_rows,
                                NULL, ones, 0, NULL};
    int rc = run_rows(team, MLC_KIND_ALLGATHER, dtype, MLC_OP_SUM, 0, 2, rows * row_elements, 1,
                      row_elements, &call, err, errlen);
    free(ones);
    return rc;
}

int mlc_team_allgatherv(mlc_team *team, const void *input, void *output, const int64_t *all_rows,
                        int64_t row_elements, int dtype, char *err, size_t errlen) {
    if (bad_rows(team, row_elements, dtype) || !all_rows)
        return fail(err, errlen, "invalid allgather arguments (row counts, row length or dtype)");
    const int n = team->ctx->size;
    int64_t rows = 0;
    for (int r = 0; r < n; r++) rows += all_rows[r];
    if ((all_rows[team->ctx->rank] * row_elements > 0 && !input) || (rows * row_elements > 0 && !output))
        return fail(err, errlen, "invalid allgather arguments (no input or output buffer)");
    const mlc_rows_call call = {dtype, mlc_dtype_size(dtype), MLC_OP_SUM, row_elements, input, output,
                                NULL, all_rows, 0, NULL};
    return run_rows(team, MLC_KIND_ALLGATHER, dtype, MLC_OP_SUM, 1, 2, rows * row_elements, 0,
                    row_elements, &call, err, errlen);
}

int mlc_team_reducescatter(mlc_team *team, const void *input, void *output, int64_t rows,
                           int64_t row_elements, int dtype, int op, char *err, size_t errlen) {
    if (bad_rows(team, row_elements, dtype) || rows < 0 || op < 0 || op >= MLC_NUM_OPS)
        return fail(err, errlen, "invalid reducescatter arguments (rows, row length, dtype or op)");
    const int n = team->ctx->size;
    if (rows * row_elements > 0 && (!input || (!output && mlc_rows_share(rows, n, team->ctx->rank))))
        return fail(err, errlen, "invalid reducescatter arguments (no input or output buffer)");
    int64_t *shares = malloc(n * sizeof *shares);
    if (!shares) return MLC_ERR_NOMEM;
    for (int r = 0; r < n; r++) shares[r] = mlc_rows_share(rows, n, r);
    const mlc_rows_call call = {dtype, mlc_dtype_size(dtype), op, row_elements, input, output,
                                NULL, shares, 0, &team->rows_staging};
    int rc = run_rows(team, MLC_KIND_REDUCESCATTER, dtype, op, 0, 1, rows * row_elements, 0,
                      row_elements, &call, err, errlen);
    free(shares);
    return rc;
}

int mlc_team_alltoall_splits(mlc_team *team, const int64_t *send_rows, int64_t row_elements,
                             int dtype, int64_t *recv_rows, char *err, size_t errlen) {
    if (bad_rows(team, row_elements, dtype) || !send_rows || !recv_rows)
        return fail(err, errlen, "invalid alltoall arguments (splits, row length or dtype)");
    const int n = team->ctx->size;
    int64_t rows = 0;
    for (int r = 0; r < n; r++) {
        if (send_rows[r] < 0) return fail(err, errlen, "invalid alltoall arguments (a negative split)");
        rows += send_rows[r];
    }
    int64_t *ones = malloc(n * sizeof *ones);
    if (!ones) return MLC_ERR_NOMEM;
    for (int r = 0; r < n; r++) ones[r] = 1;
    const mlc_rows_call call = {MLC_INT64, 8, MLC_OP_SUM, 1, (const char *)send_rows, (char *)recv_rows,
                                ones, ones, 0, NULL};
    int rc = run_rows(team, MLC_KIND_ALLTOALL, dtype, MLC_OP_SUM, 0, 2, rows * row_elements, 1,
                      row_elements, &call, err, errlen);
    free(ones);
    return rc;
}

int mlc_team_alltoallv(mlc_team *team, const void *input, const int64_t *send_rows, void *output,
                       const int64_t *recv_rows, int64_t row_elements, int dtype, char *err,
                       size_t errlen) {
    if (bad_rows(team, row_elements, dtype) || !send_rows || !recv_rows)
        return fail(err, errlen, "invalid alltoall arguments (splits, row length or dtype)");
    const int n = team->ctx->size;
    int64_t sent = 0, received = 0;
    for (int r = 0; r < n; r++) {
        sent += send_rows[r];
        received += recv_rows[r];
    }
    if ((sent * row_elements > 0 && !input) || (received * row_elements > 0 && !output))
        return fail(err, errlen, "invalid alltoall arguments (no input or output buffer)");
    const mlc_rows_call call = {dtype, mlc_dtype_size(dtype), MLC_OP_SUM, row_elements, input, output,
                                send_rows, recv_rows, 0, NULL};
    return run_rows(team, MLC_KIND_ALLTOALL, dtype, MLC_OP_SUM, 1, 2, sent * row_elements, 1,
                    row_elements, &call, err, errlen);
}
