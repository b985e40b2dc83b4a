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
 * before any rank sizes a buffer from the others' numbers. That request's sizes
 * ride inside its agreement (each rank fills its own int64 slots of n, or of n x n
 * for splits, and the check's tree sums them: ceil(log2 n) message latencies and
 * nothing after), while they fit the direct payload (ML_COMM_DIRECT_BYTES); past
 * that, and without the check, a ring of int64 moves them. The rows' shape (the
 * dimensions after the first) is compared, not only their length.
 *
 * An allgather's rows ride with its counts too while every rank's fit its share of
 * that payload (agree/exchange.c): then the check itself gathers them and there is no
 * data request, on any rank (3 test-bed nodes, 60-504 bytes: 271-298 -> 132-145 us).
 *
 * Otherwise, an allgather's data request made with the counts its checked counts request
 * returned is covered by that check and sends no check of its own: one agreement
 * round trip less per allgather (at 4 test-bed nodes the counts request took
 * 144-180 us of a 1 MiB allgather, more than ml_comm's ring was ahead of MPI's).
 * Its data moves on the caller's communicator, which carries only blocking
 * requests, in the order every rank's counts requests were checked in. A rank that
 * cannot allocate its output still takes part in the data request and relays
 * (allgatherv_ring.c).
 *
 * An alltoall's splits are checked here, not by the caller: a rank whose splits
 * are wrong still takes part in the exchange of the splits, its signature saying
 * what was wrong (agree.h, MLC_BAD_*), so that every rank fails the call at once
 * with the same message instead of its peers waiting for it. Without the
 * agreement (one rank, or ML_COMM_CHECK_LAYOUT=0) it fails on that rank alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "team.h"

int mlc_team_rank(const mlc_team *team) { return team->ctx->rank; }
int mlc_team_size(const mlc_team *team) { return team->ctx->size; }

static int fail(char *err, size_t errlen, const char *what) {
    if (err && errlen) snprintf(err, errlen, "%s", what);
    return MLC_ERR_ARG;
}

/* The elements of one row: the product of its dimensions; -1 when one is negative or
 * the product passes 2^63-1. */
static int64_t row_elements_of(int row_ndim, const int64_t *row_shape) {
    if (row_ndim < 0 || (row_ndim > 0 && !row_shape)) return -1;
    int64_t n = 1;
    for (int d = 0; d < row_ndim; d++)
        if (row_shape[d] < 0 || mlc_mul_overflows(n, row_shape[d], &n)) return -1;
    return n;
}

/* rows rows of row_elements elements of dtype: their elements and bytes, or 1 when
 * either passes 2^63-1. */
static int rows_size(int64_t rows, int64_t row_elements, int dtype, int64_t *elements, int64_t *bytes) {
    return mlc_mul_overflows(rows, row_elements, elements) ||
           mlc_mul_overflows(*elements, mlc_dtype_size(dtype), bytes);
}

/* The sum of n row counts, or -1 when it passes 2^63-1 (or one is negative). */
static int64_t rows_sum(const int64_t *counts, int n) {
    int64_t sum = 0;
    for (int r = 0; r < n; r++)
        if (counts[r] < 0 || mlc_add_overflows(sum, counts[r], &sum)) return -1;
    return sum;
}

static int bad_rows(const mlc_team *team, int64_t row_elements, int dtype) {
    return !team || row_elements < 0 || dtype < 0 || dtype >= MLC_NUM_DTYPES;
}

/* What a request of rows signs beyond its sizes: the rows' shape, and what the
 * caller's check of its arguments found. */
typedef struct rows_sign {
    int row_ndim;
    const int64_t *row_shape;
    int bad_args;
    int64_t bad_detail[2];
} rows_sign;

/* Sizes that the agreement may carry (mlc_sign_input.sizes_*); carried: it did. An
 * allgather's own rows may ride along (rows_*; rows_carried: they did). */
typedef struct rows_sizes {
    int64_t count;
    const int64_t *in;
    int64_t *out;
    int carried;
    const void *rows_in;
    int64_t rows_bytes;
    char *rows_out;
    int rows_carried;
} rows_sizes;

/* One request: part `part` of the call's nparts, its signed sizes (total elements, or
 * sizes_vary) and what its algorithm moves; sizes (or NULL): what the check may carry
 * instead, when it runs and they fit its direct payload. covered: an earlier request's
 * check covers this one, which sends none; *checked (or NULL): the agreement checked it. */
static int run_rows(mlc_team *team, int kind, int dtype, int op, int part, int nparts, int64_t total,
                    int sizes_vary, int64_t row_elements, const rows_sign *sign, const mlc_rows_call *call,
                    rows_sizes *sizes, int covered, int *checked, char *err, size_t errlen) {
    mlc_tensor tensor = {call->output, call->input, total, 0, 0};
    int64_t starts[2];
    mlc_request req = {0};
    req.tensors = &tensor;
    req.starts = starts;
    mlc_fill_request(&req, team, kind, &tensor, 1, dtype, op, 0, 1);
    req.part = part;
    req.nparts = nparts;
    req.rows.sizes_vary = sizes_vary;
    req.rows.row_elements = row_elements;
    req.rows.row_ndim = sign->row_ndim;
    req.rows.row_shape = sign->row_shape;
    req.fault.bad_args = sign->bad_args;
    req.fault.bad_detail[0] = sign->bad_detail[0];
    req.fault.bad_detail[1] = sign->bad_detail[1];
    req.rows.call = *call;
    req.rows.covered = covered;
    if (sizes && mlc_agree_wants(&team->agree, kind, dtype)) {
        pthread_mutex_lock(&team->lock); /* the threshold is a setting */
        req.plan.direct = sizes->count * (int64_t)sizeof(int64_t) <= team->agree.direct_bytes;
        pthread_mutex_unlock(&team->lock);
        if (req.plan.direct) {
            req.rows.sizes_count = sizes->count;
            req.rows.sizes_in = sizes->in;
            req.rows.sizes_out = sizes->out;
            req.rows.rows_in = sizes->rows_in;
            req.rows.rows_bytes = sizes->rows_bytes;
            req.rows.rows_out = sizes->rows_out;
        }
    }
    int rc = mlc_run_blocking(team, &req, err, errlen);
    if (sizes) {
        sizes->carried = rc == MLC_OK && req.agreement.done_by_exchange;
        sizes->rows_carried = sizes->carried && req.agreement.rows_carried;
    }
    if (checked) *checked = req.agreement.state != MLC_CHECK_NONE;
    return rc;
}

/* What an allgather's data request must repeat of its checked counts request: the
 * counts, the dtype and the row length (FNV-1a). */
static uint64_t rows_digest(const int64_t *all_rows, int n, int dtype, int64_t row_elements) {
    uint64_t h = 14695981039346656037ull;
    const int64_t head[2] = {dtype, row_elements};
    for (int i = 0; i < n + 2; i++) {
        const uint64_t v = (uint64_t)(i < 2 ? head[i] : all_rows[i - 2]);
        for (int b = 0; b < 8; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
    }
    return h;
}

/* A caller's 0-d tensor (row_ndim MLC_ROWS_NONE): no rows, and a bad argument to sign. */
static int no_rows(int *row_ndim, const int64_t **row_shape, int64_t *rows) {
    if (*row_ndim != MLC_ROWS_NONE) return 0;
    *row_ndim = 0;
    *row_shape = NULL;
    *rows = 0;
    return 1;
}

/* A bad argument with no exchange to carry it (one rank, or the check switched off):
 * this rank fails alone, in the words the verdict would use. */
static int bad_alone(const mlc_team *team, const char *kind, const rows_sign *sign, char *err, size_t errlen) {
    char what[256];
    mlc_describe_bad_args(sign->bad_args, sign->bad_detail, what, sizeof what);
    if (err && errlen) snprintf(err, errlen, "invalid %s arguments: rank %d: %s", kind, team->ctx->rank, what);
    return MLC_ERR_ARG;
}

/* n ones: one int64 row per rank, for the exchanges of sizes. */
static int64_t *ones(int n) {
    int64_t *v = malloc(n * sizeof *v);
    for (int r = 0; v && r < n; r++) v[r] = 1;
    return v;
}

/* The signature of a call's first request: what the caller's check found (a 0-d tensor,
 * scalar), or the front end's refusal (refused: its tensor and reason; NULL: none). */
static rows_sign first_sign(int row_ndim, const int64_t *row_shape, int scalar, const int64_t *refused) {
    if (refused) return (rows_sign){row_ndim, row_shape, MLC_BAD_REFUSED, {refused[0], refused[1]}};
    return (rows_sign){row_ndim, row_shape, scalar ? MLC_BAD_NO_ROWS : MLC_BAD_NONE, {0, 0}};
}

static int allgather_rows(mlc_team *team, int64_t rows, int row_ndim, const int64_t *row_shape, int dtype,
                          const void *input, void *carried, int *carried_done, int64_t *all_rows,
                          const int64_t *refused, char *err, size_t errlen) {
    const int scalar = no_rows(&row_ndim, &row_shape, &rows);
    const int64_t row_elements = row_elements_of(row_ndim, row_shape);
    if (carried_done) *carried_done = 0;
    if (bad_rows(team, row_elements, dtype) || rows < 0 || !all_rows || (carried && !carried_done))
        return fail(err, errlen, "invalid allgather arguments (rows, row shape, dtype or output)");
    int64_t own_elements, own_bytes;
    if (rows_size(rows, row_elements, dtype, &own_elements, &own_bytes))
        return fail(err, errlen, "invalid allgather arguments (rows times the row's bytes pass 2^63-1)");
    if (carried && own_bytes > 0 && !input)
        return fail(err, errlen, "invalid allgather arguments (no input buffer)");
    const int n = team->ctx->size;
    int64_t *each = ones(n), *mine = calloc(n, sizeof *mine);
    if (!each || !mine) {
        free(each);
        free(mine);
        return MLC_ERR_NOMEM;
    }
    mine[team->ctx->rank] = rows;
    const mlc_rows_call call = {MLC_INT64, 8, MLC_OP_SUM, 1, (const char *)&rows, (char *)all_rows,
                                NULL, each, 0, NULL, NULL};
    const rows_sign sign = first_sign(row_ndim, row_shape, scalar, refused);
    if (sign.bad_args && !mlc_agree_wants(&team->agree, MLC_KIND_ALLGATHER, dtype)) {
        free(each);
        free(mine);
        return bad_alone(team, "allgather", &sign, err, errlen);
    }
    rows_sizes sizes = {.count = n, .in = mine, .out = all_rows, .rows_in = input, .rows_bytes = own_bytes,
                        .rows_out = carried};
    int checked = 0;
    int rc = run_rows(team, MLC_KIND_ALLGATHER, dtype, MLC_OP_SUM, 0, 2, own_elements, 1,
                      row_elements, &sign, &call, &sizes, 0, &checked, err, errlen);
    if (rc == MLC_OK && sizes.rows_carried) { /* every rank has every rank's rows: no step 2 */
        *carried_done = 1;
    } else if (rc == MLC_OK && checked) { /* its data request, with these counts, needs no check */
        const uint64_t digest = rows_digest(all_rows, n, dtype, row_elements);
        pthread_mutex_lock(&team->lock);
        team->caller.rows_agreed = digest;
        pthread_mutex_unlock(&team->lock);
    }
    free(each);
    free(mine);
    if (rc == MLC_OK && sign.bad_args) rc = fail(err, errlen, "invalid allgather arguments"); /* never: the verdict fails */
    return rc;
}

int mlc_team_allgather_rows(mlc_team *team, int64_t rows, int row_ndim, const int64_t *row_shape, int dtype,
                            const void *input, void *carried, int *carried_done, int64_t *all_rows, char *err,
                            size_t errlen) {
    return allgather_rows(team, rows, row_ndim, row_shape, dtype, input, carried, carried_done, all_rows, NULL,
                          err, errlen);
}

int mlc_team_allgatherv(mlc_team *team, const void *input, void *output, const int64_t *all_rows,
                        int row_ndim, const int64_t *row_shape, int dtype, char *err, size_t errlen) {
    const int64_t row_elements = row_elements_of(row_ndim, row_shape);
    if (bad_rows(team, row_elements, dtype) || !all_rows)
        return fail(err, errlen, "invalid allgather arguments (row counts, row shape or dtype)");
    const int n = team->ctx->size;
    /* The counts are every rank's, the same everywhere (its counts request agreed on them):
     * every rank refuses alike. */
    const int64_t rows = rows_sum(all_rows, n);
    int64_t elements, bytes;
    if (rows < 0 || rows_size(rows, row_elements, dtype, &elements, &bytes))
        return fail(err, errlen, "invalid allgather arguments (the gathered rows pass 2^63-1 bytes)");
    if (all_rows[team->ctx->rank] * row_elements > 0 && !input)
        return fail(err, errlen, "invalid allgather arguments (no input buffer)");
    const mlc_rows_call call = {dtype, mlc_dtype_size(dtype), MLC_OP_SUM, row_elements, input, output,
                                NULL, all_rows, 0, NULL, NULL};
    const rows_sign sign = {row_ndim, row_shape, MLC_BAD_NONE, {0, 0}};
    /* With the counts its checked counts request returned, on every rank alike: that
     * check covers this request, once. */
    const uint64_t digest = rows_digest(all_rows, n, dtype, row_elements);
    pthread_mutex_lock(&team->lock);
    const int covered = digest != 0 && team->caller.rows_agreed == digest;
    if (covered) team->caller.rows_agreed = 0;
    pthread_mutex_unlock(&team->lock);
    return run_rows(team, MLC_KIND_ALLGATHER, dtype, MLC_OP_SUM, 1, 2, elements, 0,
                    row_elements, &sign, &call, NULL, covered, NULL, err, errlen);
}

static int reducescatter(mlc_team *team, const void *input, void *output, int64_t rows, int row_ndim,
                         const int64_t *row_shape, int dtype, int op, const int64_t *refused, char *err,
                         size_t errlen) {
    const int scalar = no_rows(&row_ndim, &row_shape, &rows);
    const int64_t row_elements = row_elements_of(row_ndim, row_shape);
    if (bad_rows(team, row_elements, dtype) || rows < 0 || op < 0 || op >= MLC_NUM_OPS)
        return fail(err, errlen, "invalid reducescatter arguments (rows, row shape, dtype or op)");
    if (!mlc_dtype_is_reducible(dtype)) return fail(err, errlen, "reducescatter cannot reduce bool");
    const int n = team->ctx->size;
    int64_t elements, bytes;
    if (rows_size(rows, row_elements, dtype, &elements, &bytes))
        return fail(err, errlen, "invalid reducescatter arguments (rows times the row's bytes pass 2^63-1)");
    if (elements > 0 && (!input || (!output && mlc_rows_share(rows, n, team->ctx->rank))))
        return fail(err, errlen, "invalid reducescatter arguments (no input or output buffer)");
    int64_t *shares = malloc(n * sizeof *shares);
    if (!shares) return MLC_ERR_NOMEM;
    for (int r = 0; r < n; r++) shares[r] = mlc_rows_share(rows, n, r);
    const mlc_rows_call call = {dtype, mlc_dtype_size(dtype), op, row_elements, input, output,
                                NULL, shares, 0, &team->caller.rows_staging, NULL};
    const rows_sign sign = first_sign(row_ndim, row_shape, scalar, refused);
    if (sign.bad_args && !mlc_agree_wants(&team->agree, MLC_KIND_REDUCESCATTER, dtype)) {
        free(shares);
        return bad_alone(team, "reducescatter", &sign, err, errlen);
    }
    int rc = run_rows(team, MLC_KIND_REDUCESCATTER, dtype, op, 0, 1, elements, 0,
                      row_elements, &sign, &call, NULL, 0, NULL, err, errlen);
    free(shares);
    if (rc == MLC_OK && sign.bad_args) rc = fail(err, errlen, "invalid reducescatter arguments"); /* never: the verdict fails */
    return rc;
}

int mlc_team_reducescatter(mlc_team *team, const void *input, void *output, int64_t rows, int row_ndim,
                           const int64_t *row_shape, int dtype, int op, char *err, size_t errlen) {
    return reducescatter(team, input, output, rows, row_ndim, row_shape, dtype, op, NULL, err, errlen);
}

/* The splits this rank sends into send_rows (n of them), or what is wrong with them
 * in sign (nsplits < 0: not a list of integers; else splits NULL: rows / n to each). */
static void check_splits(const int64_t *splits, int nsplits, int64_t rows, int n, int64_t *send_rows,
                         rows_sign *sign) {
    int64_t sum = 0;
    for (int d = 0; d < n; d++) send_rows[d] = splits || nsplits < 0 || rows % n ? 0 : rows / n;
    if (nsplits < 0) {
        sign->bad_args = MLC_BAD_SPLITS_NOT_INTEGERS;
        return;
    }
    if (!splits) {
        if (rows % n) *sign = (rows_sign){sign->row_ndim, sign->row_shape, MLC_BAD_ROWS_UNEVEN, {rows, n}};
        return;
    }
    if (nsplits != n) {
        *sign = (rows_sign){sign->row_ndim, sign->row_shape, MLC_BAD_SPLITS_COUNT, {nsplits, n}};
        return;
    }
    for (int d = 0; d < n; d++) {
        if (splits[d] < 0) {
            *sign = (rows_sign){sign->row_ndim, sign->row_shape, MLC_BAD_SPLIT_NEGATIVE, {d, splits[d]}};
            break;
        }
        if (mlc_add_overflows(sum, splits[d], &sum)) { /* a wrapped sum could equal rows */
            *sign = (rows_sign){sign->row_ndim, sign->row_shape, MLC_BAD_SPLITS_OVERFLOW, {d, splits[d]}};
            break;
        }
    }
    if (!sign->bad_args && sum != rows)
        *sign = (rows_sign){sign->row_ndim, sign->row_shape, MLC_BAD_SPLITS_SUM, {sum, rows}};
    for (int d = 0; d < n && !sign->bad_args; d++) send_rows[d] = splits[d];
    if (sign->bad_args)
        for (int d = 0; d < n; d++) send_rows[d] = 0; /* nothing is ever sized from them */
}

static int alltoall_splits(mlc_team *team, const int64_t *splits, int nsplits, int64_t rows, int row_ndim,
                           const int64_t *row_shape, int dtype, int64_t *send_rows, int64_t *recv_rows,
                           const int64_t *refused, char *err, size_t errlen) {
    const int scalar = no_rows(&row_ndim, &row_shape, &rows);
    const int64_t row_elements = row_elements_of(row_ndim, row_shape);
    if (bad_rows(team, row_elements, dtype) || rows < 0 || !send_rows || !recv_rows)
        return fail(err, errlen, "invalid alltoall arguments (rows, row shape, dtype or outputs)");
    const int n = team->ctx->size;
    rows_sign sign = {row_ndim, row_shape, MLC_BAD_NONE, {0, 0}};
    check_splits(splits, nsplits, rows, n, send_rows, &sign);
    if (scalar || refused) sign = first_sign(row_ndim, row_shape, scalar, refused);
    if (sign.bad_args && !mlc_agree_wants(&team->agree, MLC_KIND_ALLTOALL, dtype))
        return bad_alone(team, "alltoall", &sign, err, errlen);
    /* The n x n matrix of splits, this rank's row filled: column r is what rank r receives. */
    int64_t *each = ones(n), *matrix = calloc((size_t)n * n, sizeof *matrix),
            *summed = malloc((size_t)n * n * sizeof *summed);
    if (!each || !matrix || !summed) {
        free(each);
        free(matrix);
        free(summed);
        return MLC_ERR_NOMEM;
    }
    memcpy(matrix + (size_t)team->ctx->rank * n, send_rows, n * sizeof *send_rows);
    const mlc_rows_call call = {MLC_INT64, 8, MLC_OP_SUM, 1, (const char *)send_rows, (char *)recv_rows,
                                each, each, 0, NULL, NULL};
    rows_sizes sizes = {.count = (int64_t)n * n, .in = matrix, .out = summed};
    int rc = run_rows(team, MLC_KIND_ALLTOALL, dtype, MLC_OP_SUM, 0, 2, rows * row_elements, 1,
                      row_elements, &sign, &call, &sizes, 0, NULL, err, errlen);
    for (int s = 0; s < n && sizes.carried; s++) recv_rows[s] = summed[(size_t)s * n + team->ctx->rank];
    free(each);
    free(matrix);
    free(summed);
    if (rc == MLC_OK && sign.bad_args) rc = fail(err, errlen, "invalid alltoall arguments"); /* never: the verdict fails */
    return rc;
}

int mlc_team_alltoall_splits(mlc_team *team, const int64_t *splits, int nsplits, int64_t rows, int row_ndim,
                             const int64_t *row_shape, int dtype, int64_t *send_rows, int64_t *recv_rows,
                             char *err, size_t errlen) {
    return alltoall_splits(team, splits, nsplits, rows, row_ndim, row_shape, dtype, send_rows, recv_rows, NULL,
                           err, errlen);
}

int mlc_rows_refuse(mlc_team *team, int kind, const int64_t refused[2], char *err, size_t errlen) {
    const int n = team->ctx->size;
    /* What the call's first request fills, as the others' do: an allgather may carry rows. */
    int64_t *counts = calloc((size_t)2 * n, sizeof *counts);
    char *carried = malloc(MLC_ROWS_CARRY_BYTES);
    int done = 0, rc = MLC_ERR_NOMEM;
    if (counts && carried) {
        if (kind == MLC_KIND_ALLGATHER)
            rc = allgather_rows(team, 0, 0, NULL, MLC_FLOAT32, NULL, carried, &done, counts, refused, err, errlen);
        else if (kind == MLC_KIND_REDUCESCATTER)
            rc = reducescatter(team, NULL, NULL, 0, 0, NULL, MLC_FLOAT32, MLC_OP_SUM, refused, err, errlen);
        else
            rc = alltoall_splits(team, NULL, 0, 0, 0, NULL, MLC_FLOAT32, counts, counts + n, refused, err, errlen);
    }
    free(counts);
    free(carried);
    return rc;
}

int mlc_team_alltoallv(mlc_team *team, const void *input, const int64_t *send_rows, void *output,
                       const int64_t *recv_rows, int row_ndim, const int64_t *row_shape, int dtype, char *err,
                       size_t errlen) {
    const int64_t row_elements = row_elements_of(row_ndim, row_shape);
    if (bad_rows(team, row_elements, dtype) || !send_rows || !recv_rows)
        return fail(err, errlen, "invalid alltoall arguments (splits, row shape or dtype)");
    const int n = team->ctx->size;
    const int64_t sent = rows_sum(send_rows, n), received = rows_sum(recv_rows, n);
    int64_t sent_elements = 0, sent_bytes = 0, received_elements = 0, received_bytes = 0;
    /* What this rank finds wrong here is signed, not returned: the others are about to
     * exchange with it, and every rank fails the request at its check instead. */
    rows_sign sign = {row_ndim, row_shape, MLC_BAD_NONE, {0, 0}};
    if (sent < 0 || rows_size(sent, row_elements, dtype, &sent_elements, &sent_bytes))
        sign = (rows_sign){row_ndim, row_shape, MLC_BAD_SIZE_OVERFLOW, {sent, row_elements}};
    else if (received < 0 || rows_size(received, row_elements, dtype, &received_elements, &received_bytes))
        sign = (rows_sign){row_ndim, row_shape, MLC_BAD_SIZE_OVERFLOW, {received, row_elements}};
    else if (sent_bytes > 0 && !input)
        sign = (rows_sign){row_ndim, row_shape, MLC_BAD_NO_BUFFER, {0, sent_bytes}};
    else if (received_bytes > 0 && !output)
        sign = (rows_sign){row_ndim, row_shape, MLC_BAD_NO_BUFFER, {1, received_bytes}};
    if (sign.bad_args && !mlc_agree_wants(&team->agree, MLC_KIND_ALLTOALL, dtype)) {
        char what[256];
        mlc_describe_bad_args(sign.bad_args, sign.bad_detail, what, sizeof what);
        if (err && errlen) snprintf(err, errlen, "invalid alltoall arguments: rank %d: %s", team->ctx->rank, what);
        return MLC_ERR_ARG;
    }
    const mlc_rows_call call = {dtype, mlc_dtype_size(dtype), MLC_OP_SUM, row_elements, input, output,
                                send_rows, recv_rows, 0, NULL, NULL};
    return run_rows(team, MLC_KIND_ALLTOALL, dtype, MLC_OP_SUM, 1, 2, sent_elements, 1,
                    row_elements, &sign, &call, NULL, 0, NULL, err, errlen);
}
