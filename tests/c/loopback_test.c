/* The algorithms and the agreement exchange without MPI: ranks are threads of
 * this process over the loopback transport (csrc/transport/loopback.c), at 1 to
 * MAX_RANKS ranks ("loopback_test N M...": at 1 to N ranks, then at each M). Built and run by tests/unit/test_loopback.py (also under
 * AddressSanitizer). Inputs are small integers, so every sum is exact and every
 * element's expected value is known; every rank must end with the same bits.
 * Every op (sum, average, min, max, product) of every allreduce algorithm; the
 * collectives of rows (allgatherv with a rank of no rows, reduce-scatterv with rows
 * that do not divide evenly, every dtype and op, alltoallv with uneven and empty
 * splits). Every algorithm runs in place and out of place (input read, never written),
 * and on noisy float32 values (inexact sums) whose bits must match on every rank.
 * The ring also runs with 16-bit values on the wire (float32, bf16 and fp16):
 * exactly on small integers (an average's quotient rounded to 16 bits, as the
 * allgather sends it), bit for bit across ranks on values that 16 bits cannot
 * hold (each result must be a 16-bit value), and fp16 overflow failing on every
 * rank. The agreement exchange: verdicts, messages naming each setting and its
 * ranks, the stop flag, NaN/Inf, sizes that vary by rank, message counts, direct
 * allreduces bit for bit, and stall warnings naming the late rank (stderr is
 * read back from a file for those).
 * Exit 0 when everything matched; the first failures are printed. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agree/agree.h"
#include "algos/algo.h"
#include "transport/loopback.h"

#define MAX_RANKS 16

static atomic_int failures;
static atomic_long checks;

static void fail(const char *what, int n, int rank, long long i, double got, double want) {
    if (atomic_fetch_add(&failures, 1) < 20)
        fprintf(stderr, "%s: n=%d rank %d at %lld: got %.9g want %.9g\n", what, n, rank, i, got, want);
}

static int value(int r, int64_t i) { return (int)((i * 7 + r * 3) % 11) - 5; }
/* A product's inputs: 2, -1 or 1, so that a product over 16 ranks stays exact in every dtype. */
static int product_value(int r, int64_t i) { return (int)((i + r) % 3) == 0 ? 2 : (i + r) % 3 == 1 ? -1 : 1; }
static int input_value(int op, int r, int64_t i) { return op == MLC_OP_PRODUCT ? product_value(r, i) : value(r, i); }

/* ---- running a job: one thread per rank ---- */

typedef struct job job;
typedef void (*rank_fn)(job *j, int rank, mlc_tp *tp);

struct job {
    int n;
    mlc_loopback *lb;
    rank_fn fn;
    void *arg;
    pthread_barrier_t barrier;
};

typedef struct {
    job *j;
    int rank;
} rank_arg;

static void *rank_main(void *p) {
    rank_arg *a = p;
    char message[MLC_MSG_LEN] = "";
    mlc_tp tp;
    mlc_loopback_open(a->j->lb, a->rank, &tp, message);
    a->j->fn(a->j, a->rank, &tp);
    return NULL;
}

static void run_job(int n, rank_fn fn, void *arg) {
    job j = {n, mlc_loopback_create(n), fn, arg, {{0}}};
    pthread_t *th = calloc(n, sizeof *th);
    rank_arg *args = calloc(n, sizeof *args);
    pthread_barrier_init(&j.barrier, NULL, (unsigned)n);
    for (int r = 0; r < n; r++) {
        args[r] = (rank_arg){&j, r};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&j.barrier);
    mlc_loopback_destroy(j.lb);
    free(th);
    free(args);
}

/* ---- allreduce: every algorithm of the table, every count and dtype ---- */

typedef struct {
    int algorithm, dtype, op, nseg, out_of_place;
    int64_t count;
    int compression; /* MLC_COMPRESSION_*: 16-bit values on the wire (ring, Rabenseifner) */
    int noise;       /* values 16 bits cannot hold: only ranks' bits and rounding checked */
    float scale;     /* of every value; 0: 1 */
    char *results[MAX_RANKS]; /* each rank's output, compared bit for bit */
} allreduce_case;

/* v held by an integer dtype: narrower ones wrap (modulo 2^bits), as the kernels' sums do. */
static double as_dtype(int dtype, long long v) {
    switch (dtype) {
    case MLC_UINT8: return (uint8_t)v;
    case MLC_INT8: return (int8_t)v;
    case MLC_UINT16: return (uint16_t)v;
    case MLC_INT16: return (int16_t)v;
    case MLC_INT32: return (int32_t)v;
    default: return (double)v;
    }
}

static int is_integer(int dtype) { return !mlc_dtype_is_float(dtype); }

static void fill(void *buf, int dtype, int64_t count, int rank, int op) {
    for (int64_t i = 0; i < count; i++) {
        const int v = input_value(op, rank, i);
        switch (dtype) {
        case MLC_FLOAT32: ((float *)buf)[i] = (float)v; break;
        case MLC_FLOAT64: ((double *)buf)[i] = v; break;
        case MLC_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
        case MLC_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
        case MLC_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
        case MLC_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
        case MLC_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
        case MLC_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
        case MLC_FLOAT16: ((_Float16 *)buf)[i] = (_Float16)v; break;
        case MLC_BFLOAT16: { /* small integers are exact in bfloat16: the top half of a float */
            float f = (float)v;
            uint32_t bits;
            memcpy(&bits, &f, 4);
            ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16);
            break;
        }
        }
    }
}

static double element(const void *buf, int dtype, int64_t i) {
    switch (dtype) {
    case MLC_FLOAT32: return ((const float *)buf)[i];
    case MLC_FLOAT64: return ((const double *)buf)[i];
    case MLC_INT32: return ((const int32_t *)buf)[i];
    case MLC_INT64: return (double)((const int64_t *)buf)[i];
    case MLC_UINT8: return ((const uint8_t *)buf)[i];
    case MLC_INT8: return ((const int8_t *)buf)[i];
    case MLC_UINT16: return ((const uint16_t *)buf)[i];
    case MLC_INT16: return ((const int16_t *)buf)[i];
    case MLC_FLOAT16: return (double)((const _Float16 *)buf)[i];
    default: {
        uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    }
}

/* A rank's input as its dtype holds it. */
static double input_element(int dtype, int op, int r, int64_t i) { return as_dtype(dtype, input_value(op, r, i)); }

/* x rounded to 16 bits (nearest, ties to even), computed apart from csrc/base/wire.c:
 * bf16 keeps 8 significant bits, fp16 11 (subnormals and range do not arise here). */
static float round16(float x, int compression) {
    if (compression == MLC_COMPRESSION_NONE || x == 0) return x;
    int e;
    double m = frexp(x, &e), bits = compression == MLC_COMPRESSION_BF16 ? 256 : 2048;
    return (float)ldexp(nearbyint(m * bits) / bits, e);
}

static float noise(int r, int64_t i) { return (float)value(r, i) * 0.1037f + (float)i * 1e-3f; }

static double expected(int dtype, int op, int n, int64_t i) {
    if (op == MLC_OP_MIN || op == MLC_OP_MAX) { /* compared as the dtype holds them: unsigned wrap */
        double acc = input_element(dtype, op, 0, i);
        for (int r = 1; r < n; r++) {
            double v = input_element(dtype, op, r, i);
            acc = op == MLC_OP_MIN ? (v < acc ? v : acc) : (v > acc ? v : acc);
        }
        return acc;
    }
    if (op == MLC_OP_PRODUCT) {
        long long acc = 1;
        for (int r = 0; r < n; r++) acc *= input_value(op, r, i);
        return as_dtype(dtype, acc);
    }
    long long sum = 0;
    for (int r = 0; r < n; r++) sum += value(r, i);
    if (op == MLC_OP_SUM || n == 1) return as_dtype(dtype, sum);
    if (is_integer(dtype)) return (double)((long long)as_dtype(dtype, sum) / n); /* C division */
    if (dtype == MLC_FLOAT32) return (float)sum / (float)n;
    return (double)sum / n; /* float64; halves are tested with sums only */
}

static void allreduce_rank(job *j, int rank, mlc_tp *tp) {
    allreduce_case *c = j->arg;
    const int es = mlc_dtype_size(c->dtype);
    char *buf = calloc(c->count + 1, es), *input = NULL;
    const int64_t scratch_bytes = (int64_t)(j->n + 1) * (c->count + 1) * es + 64;
    char *scratch = malloc(scratch_bytes);
    fill(buf, c->dtype, c->count, rank, c->op);
    for (int64_t i = 0; c->noise && i < c->count; i++) ((float *)buf)[i] = noise(rank, i);
    /* Scaled: no input is 0, so the inputs that the first step packs (the ring's, the
     * halving's, a fold's) are beyond float16's range: every algorithm overflows. */
    for (int64_t i = 0; c->scale != 0 && i < c->count; i++) {
        float *v = (float *)buf + i;
        *v = (*v != 0 ? *v : 1) * c->scale;
    }
    if (c->out_of_place) { /* the input elsewhere, the output full of garbage */
        input = buf;
        buf = malloc((c->count + 1) * es);
        memset(buf, 0x7b, (c->count + 1) * es);
    }
    mlc_segment segs[MLC_RING_BATCH];
    int64_t first = c->nseg == 2 ? c->count / 2 : c->count;
    segs[0] = (mlc_segment){buf, input, first, 0};
    segs[1] = (mlc_segment){buf + first * es, input ? input + first * es : NULL, c->count - first, 1};
    const mlc_algo_call call = {c->dtype, es, c->op, segs, c->nseg, scratch, scratch_bytes,
                                c->compression};
    int rc = mlc_algo_find(c->algorithm)->allreduce(tp, &call);
    const int overflows = c->scale > 1 && c->compression == MLC_COMPRESSION_FP16 && j->n > 1 && c->count > 0;
    if (overflows && rc != MLC_ERR_OVERFLOW) fail("fp16 overflow not reported", j->n, rank, -1, rc, MLC_ERR_OVERFLOW);
    else if (!overflows && rc) fail(tp->message[0] ? tp->message : mlc_status_name(rc), j->n, rank, -1, rc, 0);
    for (int64_t i = 0; (c->noise || c->scale != 0) && i < c->count; i++) {
        float got = ((float *)buf)[i]; /* a 16-bit value, the one every rank holds */
        if (j->n > 1 && !overflows && got != round16(got, c->compression)) {
            fail("result is not a 16-bit value", j->n, rank, i, got, round16(got, c->compression));
            break;
        }
    }
    for (int64_t i = 0; !c->noise && c->scale == 0 && i < c->count; i++) {
        double want = expected(c->dtype, c->op, j->n, i), got = element(buf, c->dtype, i);
        if (j->n > 1 && c->compression) want = round16((float)want, c->compression);
        if (got != want) {
            fail(mlc_algorithm_name(c->algorithm), j->n, rank, i, got, want);
            break;
        }
    }
    for (int64_t i = 0; input && !c->noise && c->scale == 0 && i < c->count; i++)
        if (element(input, c->dtype, i) != input_element(c->dtype, c->op, rank, i)) {
            fail("input changed", j->n, rank, i, element(input, c->dtype, i), input_element(c->dtype, c->op, rank, i));
            break;
        }
    c->results[rank] = buf;
    free(input);
    free(scratch);
}

static void run_case(int n, allreduce_case *c) {
    run_job(n, allreduce_rank, c);
    size_t bytes = (size_t)c->count * mlc_dtype_size(c->dtype);
    for (int r = 1; r < n; r++)
        if (bytes && memcmp(c->results[0], c->results[r], bytes)) fail("ranks' bits differ", n, r, -1, 0, 0);
    for (int r = 0; r < n; r++) free(c->results[r]);
    atomic_fetch_add(&checks, 1);
}

static void allreduce_cases(int n) {
    const int algorithms[] = {MLC_ALG_RING, MLC_ALG_RECURSIVE_DOUBLING, MLC_ALG_RABENSEIFNER, MLC_ALG_DIRECT};
    const int64_t counts[] = {0, 1, n - 1, n, n + 1, 7, 1001};
    const int nalg = sizeof algorithms / sizeof *algorithms;
    int nrows = 0; /* the table's allreduce rows */
    for (int id = 0; id < 64; id++) nrows += mlc_algo_find(id) && mlc_algo_find(id)->allreduce;
    if (nalg != nrows) fail("an algorithm of the table is not tested", n, -1, -1, nalg, nrows);
    for (int a = 0; a < nalg; a++)
        for (int dtype = 0; dtype < MLC_NUM_DTYPES; dtype++)
            for (int op = MLC_OP_SUM; op < MLC_NUM_OPS && mlc_dtype_is_reducible(dtype); op++)
                for (unsigned k = 0; k < sizeof counts / sizeof *counts; k++)
                    for (int variant = 0; variant < 4; variant++) {
                        int nseg = 1 + variant % 2, out_of_place = variant / 2;
                        if (op == MLC_OP_AVERAGE && (dtype == MLC_FLOAT16 || dtype == MLC_BFLOAT16)) continue;
                        /* The direct allreduce only adds (the plan never gives it another op). */
                        if (op > MLC_OP_AVERAGE && algorithms[a] == MLC_ALG_DIRECT) continue;
                        allreduce_case c = {.algorithm = algorithms[a], .dtype = dtype, .op = op, .nseg = nseg,
                                            .out_of_place = out_of_place, .count = counts[k]};
                        run_case(n, &c);
                    }
    /* Noisy float32 sums (not exact): every rank must hold the same bits. */
    for (int a = 0; a < nalg; a++)
        for (int op = MLC_OP_SUM; op <= MLC_OP_AVERAGE; op++)
            for (int variant = 0; variant < 4; variant++) {
                allreduce_case c = {.algorithm = algorithms[a], .dtype = MLC_FLOAT32, .op = op,
                                    .nseg = 1 + variant % 2, .out_of_place = variant / 2, .count = 1001,
                                    .noise = 1};
                run_case(n, &c);
            }
    /* The ring and Rabenseifner with 16-bit values on the wire: exact, noisy (bits
     * alike, 16-bit results) and scaled up (fp16 overflows, bf16 does not). */
    const int wired_algorithms[] = {MLC_ALG_RING, MLC_ALG_RABENSEIFNER};
    for (int comp = MLC_COMPRESSION_BF16; comp <= MLC_COMPRESSION_FP16; comp++)
        for (int op = MLC_OP_SUM; op <= MLC_OP_AVERAGE; op++)
            for (unsigned k = 0; k < sizeof counts / sizeof *counts; k++)
                for (int variant = 0; variant < 24; variant++) {
                    int nseg = 1 + variant % 2, out_of_place = variant / 2 % 2, kind = variant / 4 % 3;
                    allreduce_case c = {.algorithm = wired_algorithms[variant / 12], .dtype = MLC_FLOAT32, .op = op,
                                        .nseg = nseg, .out_of_place = out_of_place, .count = counts[k],
                                        .compression = comp, .noise = kind == 1,
                                        .scale = kind == 2 ? 100000.0f : 0.0f};
                    run_case(n, &c);
                }
}

/* ---- broadcast from every root ---- */

static void broadcast_rank(job *j, int rank, mlc_tp *tp) {
    const int root = *(int *)j->arg;
    int64_t buf[333];
    for (int i = 0; i < 333; i++) buf[i] = rank * 1000 + i;
    int rc = mlc_broadcast_binomial(tp, (char *)buf, sizeof buf, root, 5);
    if (rc) fail("broadcast", j->n, rank, -1, rc, 0);
    for (int i = 0; i < 333; i++)
        if (buf[i] != root * 1000 + i) {
            fail("broadcast value", j->n, rank, i, (double)buf[i], root * 1000.0 + i);
            break;
        }
}

/* ---- the agreement exchange ---- */

/* Three requests in a row: equal signatures, then rank n-1 submitting one more
 * element (every rank must fail it, naming both), then a direct allreduce that
 * the exchange itself reduces. */
static void agree_rank(job *j, int rank, mlc_tp *tp) {
    mlc_agree ag;
    mlc_agree_init(&ag);
    if (mlc_agree_open(&ag, tp)) fail("agree open", j->n, rank, -1, 0, 0);
    float data[3][8];
    mlc_tensor tensors[3];
    int64_t starts[3][2];
    mlc_agreement a[3];
    for (int k = 0; k < 3; k++) {
        int64_t count = k == 1 && rank == j->n - 1 ? 6 : 5;
        for (int i = 0; i < 8; i++) data[k][i] = (float)value(rank, i);
        tensors[k] = (mlc_tensor){data[k], NULL, count, 0, 0};
        starts[k][0] = 0;
        starts[k][1] = count;
        mlc_sign_input in = {.kind = MLC_KIND_ALLREDUCE, .dtype = MLC_FLOAT32, .op = MLC_OP_SUM,
                             .ntensors = 1, .nparts = 1, .total = count, .tensors = &tensors[k],
                             .starts = starts[k], .direct = k == 2, .nonfinite_tensor = -1};
        memset(&a[k], 0, sizeof a[k]);
        mlc_agree_register(&ag, &a[k], k + 1, &in);
    }
    char message[MLC_MSG_LEN];
    if (mlc_agree_verdict(&ag, &a[0], message) != MLC_OK) fail(message, j->n, rank, 0, 0, 0);
    int rc = mlc_agree_verdict(&ag, &a[1], message);
    char want[64];
    snprintf(want, sizeof want, "rank %d submitted 1 tensor, 6 float32", j->n - 1);
    if (j->n > 1 && (rc != MLC_ERR_MISMATCH || !strstr(message, want))) fail(message, j->n, rank, 1, rc, 0);
    if (j->n == 1 && rc != MLC_OK) fail(message, j->n, rank, 1, rc, 0);
    if (mlc_agree_verdict(&ag, &a[2], message) != MLC_OK) fail(message, j->n, rank, 2, 0, 0);
    if (j->n > 1 && !a[2].done_by_exchange) fail("direct not done by the exchange", j->n, rank, 2, 0, 1);
    for (int i = 0; j->n > 1 && i < 5; i++)
        if (data[2][i] != (float)expected(MLC_FLOAT32, MLC_OP_SUM, j->n, i))
            fail("direct sum", j->n, rank, i, data[2][i], expected(MLC_FLOAT32, MLC_OP_SUM, j->n, i));
    pthread_barrier_wait(&j->barrier); /* no rank leaves while a peer still receives */
    mlc_agree_destroy(&ag);
}

/* Rank 0 on a team with 16-bit values on the wire, the others without: every rank
 * fails the request, naming rank 0's setting (ranks that differ would exchange
 * blocks of different sizes on the ring). */
static void agree_compression_rank(job *j, int rank, mlc_tp *tp) {
    mlc_agree ag;
    mlc_agree_init(&ag);
    if (mlc_agree_open(&ag, tp)) fail("agree open", j->n, rank, -1, 0, 0);
    float data[4] = {0};
    mlc_tensor t = {data, NULL, 4, 0, 0};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = {.kind = MLC_KIND_ALLREDUCE, .dtype = MLC_FLOAT32, .op = MLC_OP_AVERAGE,
                         .ntensors = 1, .nparts = 1, .total = 4, .tensors = &t, .starts = starts,
                         .nonfinite_tensor = -1,
                         .compression = rank == 0 ? MLC_COMPRESSION_BF16 : MLC_COMPRESSION_NONE};
    mlc_agreement a;
    memset(&a, 0, sizeof a);
    mlc_agree_register(&ag, &a, 1, &in);
    char message[MLC_MSG_LEN];
    int rc = mlc_agree_verdict(&ag, &a, message);
    const char *want = "rank 0 submitted 1 tensor, 4 float32 elements (average, compression=bf16)";
    if (rc != MLC_ERR_MISMATCH || !strstr(message, want) || !strstr(message, j->n == 2 ? "rank 1 " : "ranks 1-"))
        fail(message, j->n, rank, 0, rc, MLC_ERR_MISMATCH);
    pthread_barrier_wait(&j->barrier);
    mlc_agree_destroy(&ag);
}

/* A send that fails in the middle of an exchange: the verdict is the error, and
 * no receive of that exchange stays posted (the next exchange would reuse its
 * handles). Only rank 1 takes part; its first send fails. */
static void failing_send_rank(job *j, int rank, mlc_tp *tp) {
    if (rank != 1) return;
    mlc_loopback_fail_sends(j->lb, rank, 0);
    mlc_agree ag;
    mlc_agree_init(&ag);
    mlc_agree_open(&ag, tp);
    float x[4] = {0};
    mlc_tensor t = {x, NULL, 4, 0, 0};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = {.kind = MLC_KIND_ALLREDUCE, .dtype = MLC_FLOAT32, .op = MLC_OP_SUM,
                         .ntensors = 1, .nparts = 1, .total = 4, .tensors = &t, .starts = starts,
                         .nonfinite_tensor = -1};
    mlc_agreement a;
    memset(&a, 0, sizeof a);
    mlc_agree_register(&ag, &a, 1, &in);
    char message[MLC_MSG_LEN];
    int rc = mlc_agree_verdict(&ag, &a, message);
    if (rc != MLC_ERR_MPI || !strstr(message, "injected")) fail(message, j->n, rank, 0, rc, MLC_ERR_MPI);
    int left = mlc_loopback_posted(j->lb, rank);
    if (left) fail("receives left posted after a failed exchange", j->n, rank, 0, left, 0);
    mlc_agree_destroy(&ag);
}


/* ---- the agreement exchange: settings, stop, NaN/Inf, sizes that vary, counts ---- */

/* At most 2 ceil(log2 n) messages (sends and receives) where the ranks agree. */
static int message_bound(int n) {
    int steps = 0;
    while ((1 << steps) < n) steps++;
    return 2 * steps;
}

/* "rank 3" or "ranks 0-2" (lo..hi), as the messages write them. */
static void ranks_text(char *buf, size_t len, int lo, int hi) {
    if (lo == hi) snprintf(buf, len, "rank %d", lo);
    else snprintf(buf, len, "ranks %d-%d", lo, hi);
}

static mlc_sign_input plain_input(const mlc_tensor *t, const int64_t *starts) {
    return (mlc_sign_input){.kind = MLC_KIND_ALLREDUCE, .dtype = MLC_FLOAT32, .op = MLC_OP_AVERAGE,
                            .ntensors = 1, .nparts = 1, .total = t->count, .tensors = t,
                            .starts = starts, .nonfinite_tensor = -1, .algorithm = MLC_ALG_RING,
                            .lanes = 2, .seg_elems = 1024};
}

/* One request on a fresh engine: the verdict and its message (rank 0's bound kept). */
static int check_request(mlc_tp *tp, const mlc_sign_input *in, mlc_agreement *a, char *message,
                         job *j) {
    mlc_agree ag;
    mlc_agree_init(&ag);
    if (mlc_agree_open(&ag, tp)) fail("agree open", j->n, tp->rank, -1, 0, 0);
    memset(a, 0, sizeof *a);
    mlc_agree_register(&ag, a, 1, in);
    message[0] = '\0';
    int rc = mlc_agree_verdict(&ag, a, message);
    pthread_barrier_wait(&j->barrier); /* no rank leaves while a peer still receives */
    mlc_agree_destroy(&ag);
    return rc;
}

/* Each setting, rank n-1 alone differing: every rank fails, naming the setting,
 * both values and their ranks; the shapes agree, so no "submitted". */
typedef struct setting_case {
    const char *name, *value0, *value1;
    void (*change)(mlc_sign_input *in);
} setting_case;

static void alg_differs(mlc_sign_input *in) { in->team_algorithm = MLC_ALG_RECURSIVE_DOUBLING; }
static void ksteps_differs(mlc_sign_input *in) { in->ksteps = 3; }
static void max_steps_differs(mlc_sign_input *in) { in->max_steps = 10; }
static void plan_differs(mlc_sign_input *in) { in->algorithm = MLC_ALG_RABENSEIFNER; }
static void thread_differs(mlc_sign_input *in) { in->on_caller = 1; }
static void lanes_differ(mlc_sign_input *in) { in->lanes = 4; }
static void segment_differs(mlc_sign_input *in) { in->seg_elems = 512; }
static void group_differs(mlc_sign_input *in) { in->is_group = 1; }
static void direct_differs(mlc_sign_input *in) { in->direct = 1; }

static const setting_case SETTING_CASES[] = {
    {"config_team alg", "auto", "recursive_doubling", alg_differs},
    {"config_team ksteps", "0", "3", ksteps_differs},
    {"config_team max_steps", "0", "10", max_steps_differs},
    {"the planned algorithm", "ring", "rabenseifner", plan_differs},
    {"the thread that runs it", "the team's", "the caller's", thread_differs},
    {"lanes (threads)", "2", "4", lanes_differ},
    {"segment length (elements)", "1024", "512", segment_differs},
    {"keyed group", "no", "yes", group_differs},
    {"allreduce inside the check (ML_COMM_DIRECT_BYTES)", "no", "yes", direct_differs},
};

static void settings_rank(job *j, int rank, mlc_tp *tp) {
    const setting_case *c = j->arg;
    float data[4] = {1, 2, 3, 4};
    mlc_tensor t = {data, NULL, 4, 0, 0};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = plain_input(&t, starts);
    if (rank == j->n - 1) c->change(&in);
    mlc_agreement a;
    char message[MLC_MSG_LEN], others[32], last[32], want[MLC_MSG_LEN];
    int rc = check_request(tp, &in, &a, message, j);
    ranks_text(others, sizeof others, 0, j->n - 2);
    ranks_text(last, sizeof last, j->n - 1, j->n - 1);
    snprintf(want, sizeof want, "ranks disagree on team 0 request 1: %s: %s: %s; %s: %s. ", c->name,
             others, c->value0, last, c->value1);
    if (rc != MLC_ERR_MISMATCH || !strstr(message, want) || strstr(message, "submitted"))
        fail(message, j->n, rank, 0, rc, MLC_ERR_MISMATCH);
    if (a.messages > message_bound(j->n) + 2 * (j->n - 1)) fail("messages after a mismatch", j->n, rank, 0, a.messages, 0);
}

/* ksteps differing on every other rank and the alg on rank 0: both team settings
 * named, each with its groups of ranks; the plan's settings not. */
static void two_settings_rank(job *j, int rank, mlc_tp *tp) {
    float data[4] = {0};
    mlc_tensor t = {data, NULL, 4, 0, 0};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = plain_input(&t, starts);
    in.ksteps = rank % 2 ? 0 : 3;
    if (rank == 0) in.team_algorithm = MLC_ALG_RING, in.algorithm = MLC_ALG_RECURSIVE_DOUBLING;
    mlc_agreement a;
    char message[MLC_MSG_LEN];
    int rc = check_request(tp, &in, &a, message, j);
    char want_alg[128], want_k[128];
    if (j->n == 2) {
        snprintf(want_alg, sizeof want_alg, "config_team alg: rank 0: ring; rank 1: auto; ");
        snprintf(want_k, sizeof want_k, "config_team ksteps: rank 0: 3; rank 1: 0. ");
    } else {
        snprintf(want_alg, sizeof want_alg, "config_team alg: rank 0: ring; ranks 1-%d: auto; ", j->n - 1);
        snprintf(want_k, sizeof want_k, "config_team ksteps: ranks 0, 2");
    }
    if (rc != MLC_ERR_MISMATCH || !strstr(message, want_alg) || !strstr(message, want_k) ||
        strstr(message, "planned algorithm"))
        fail(message, j->n, rank, 0, rc, MLC_ERR_MISMATCH);
}

/* Rank n-1 asks to stop: every rank's verdict on the next request says so, at
 * the same request, and the request itself goes through. */
static void stop_rank(job *j, int rank, mlc_tp *tp) {
    mlc_agree ag;
    mlc_agree_init(&ag);
    if (mlc_agree_open(&ag, tp)) fail("agree open", j->n, rank, -1, 0, 0);
    float data[2][4] = {{1, 2, 3, 4}, {1, 2, 3, 4}};
    mlc_tensor t[2] = {{data[0], NULL, 4, 0, 0}, {data[1], NULL, 4, 0, 0}};
    int64_t starts[2] = {0, 4};
    mlc_agreement a[2];
    char message[MLC_MSG_LEN];
    for (int k = 0; k < 2; k++) {
        mlc_sign_input in = plain_input(&t[k], starts);
        memset(&a[k], 0, sizeof a[k]);
        if (k == 1 && rank == j->n - 1) mlc_agree_request_stop(&ag);
        mlc_agree_register(&ag, &a[k], k + 1, &in);
        int rc = mlc_agree_verdict(&ag, &a[k], message);
        if (rc != MLC_OK) fail(message, j->n, rank, k, rc, 0);
        if (a[k].stop_asked != (k == 1)) fail("stop flag", j->n, rank, k, a[k].stop_asked, k == 1);
        /* exactly the tree's: a folded rank sends and receives once, the others log2(p)
         * times each, plus once each for a fold partner */
        const int p2 = mlc_rd_pow2_floor(j->n), fold = mlc_rd_fold_partner(rank, j->n);
        const int want = j->n == 1 ? 0 : rank >= p2 ? 2 : 2 * mlc_rd_nsteps(j->n) + 2 * (fold >= 0);
        if (a[k].messages != want || want > message_bound(j->n)) fail("messages", j->n, rank, k, a[k].messages, want);
    }
    if (mlc_agree_stop_seq(&ag) != 2) fail("stop request", j->n, rank, 0, (double)mlc_agree_stop_seq(&ag), 2);
    pthread_barrier_wait(&j->barrier);
    mlc_agree_destroy(&ag);
}

/* Odd ranks found NaN/Inf (in tensor rank % 3, two tensors each): every rank fails
 * with the same list, and knows the count, the lowest rank and its tensor. */
static void nonfinite_rank(job *j, int rank, mlc_tp *tp) {
    float data[4] = {0};
    mlc_tensor t = {data, NULL, 4, 0, 0};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = plain_input(&t, starts);
    if (rank % 2) in.nonfinite_tensor = rank % 3, in.nonfinite_count = 2;
    mlc_agreement a;
    char message[MLC_MSG_LEN];
    int rc = check_request(tp, &in, &a, message, j);
    const int bad = j->n / 2;
    if (bad == 0) {
        if (rc != MLC_OK) fail(message, j->n, rank, 0, rc, 0);
        return;
    }
    if (rc != MLC_ERR_NONFINITE || a.nonfinite_ranks != bad || a.nonfinite_rank != 1 || a.nonfinite_tensor != 1)
        fail(message, j->n, rank, 0, a.nonfinite_ranks, bad);
    for (int r = 1; r < j->n && r < 16; r += 2) { /* as many as a message holds */
        char want[64];
        snprintf(want, sizeof want, "rank %d tensor %d (and 1 more of its tensors)", r, r % 3);
        if (!strstr(message, want)) fail(message, j->n, rank, r, 0, 0);
    }
}

/* A kind whose sizes differ by rank: each rank gathers rank+1 rows of 3 elements.
 * The totals differ and agree; a rank with rows of 4 elements is named. */
static void sizes_vary_rank(job *j, int rank, mlc_tp *tp) {
    const int odd_one = *(int *)j->arg; /* the rank whose rows differ; -1: none */
    float data[64] = {0};
    const int64_t row = rank == odd_one ? 4 : 3, count = (rank + 1) * row;
    mlc_tensor t = {data, NULL, count, 0, 0};
    int64_t starts[2] = {0, count};
    mlc_sign_input in = plain_input(&t, starts);
    in.kind = MLC_KIND_ALLGATHER;
    in.sizes_vary = 1;
    in.row_elements = row;
    mlc_agreement a;
    char message[MLC_MSG_LEN];
    int rc = check_request(tp, &in, &a, message, j);
    if (odd_one < 0) {
        if (rc != MLC_OK) fail(message, j->n, rank, 0, rc, 0);
        return;
    }
    char want[128];
    snprintf(want, sizeof want, "rank %d submitted 1 tensor, rows of 4 float32 elements (allgather)", odd_one);
    if (rc != MLC_ERR_MISMATCH || !strstr(message, want)) fail(message, j->n, rank, 0, rc, MLC_ERR_MISMATCH);
}

/* An allgather's counts request carrying its rows: rank r has (3r + 1) % 5 rows (some
 * none) of 3 float16 bit patterns naming rank and element, at most 24 bytes, within
 * each rank's share of the 1 KiB direct payload (56 bytes at 16 ranks): every rank gets
 * every rank's counts and rows, bit for bit, in rank order. big: rank n-1 has 200 rows
 * (1,200 bytes): on every rank the counts still arrive and no rows do (the data
 * request then moves them). */
static int64_t carried_rows_of(int rank, int n, int big) { return big && rank == n - 1 ? 200 : (3 * rank + 1) % 5; }

static void rows_carried_rank(job *j, int rank, mlc_tp *tp) {
    const int big = *(int *)j->arg, n = j->n;
    uint16_t mine[200 * 3];
    const int64_t rows = carried_rows_of(rank, n, big);
    for (int i = 0; i < rows * 3; i++) mine[i] = (uint16_t)(rank << 10 | i);
    int64_t sizes_in[MAX_RANKS] = {0}, sizes_out[MAX_RANKS] = {0};
    sizes_in[rank] = rows;
    static _Thread_local char carried[MLC_ROWS_CARRY_BYTES];
    mlc_tensor t = {NULL, mine, rows * 3, 0, 0};
    int64_t starts[2] = {0, rows * 3};
    mlc_sign_input in = plain_input(&t, starts);
    in.kind = MLC_KIND_ALLGATHER;
    in.dtype = MLC_FLOAT16;
    in.sizes_vary = 1;
    in.row_elements = 3;
    in.direct = 1;
    in.sizes_count = n;
    in.sizes_in = sizes_in;
    in.sizes_out = sizes_out;
    in.rows_in = mine;
    in.rows_bytes = rows * 3 * 2;
    in.rows_capacity = sizeof carried;
    in.rows_out = carried;
    mlc_agree ag;
    mlc_agree_init(&ag);
    if (mlc_agree_open(&ag, tp)) fail("agree open", n, rank, -1, 0, 0);
    mlc_agree_set_direct_bytes(&ag, 1024);
    mlc_agreement a;
    memset(&a, 0, sizeof a);
    mlc_agree_register(&ag, &a, 1, &in);
    char message[MLC_MSG_LEN] = "";
    int rc = mlc_agree_verdict(&ag, &a, message);
    pthread_barrier_wait(&j->barrier);
    mlc_agree_destroy(&ag);
    if (n == 1) return; /* one rank exchanges nothing */
    if (rc != MLC_OK || !a.done_by_exchange) fail(message, n, rank, 0, rc, 0);
    if (a.messages > message_bound(n)) fail("carried rows messages", n, rank, 0, a.messages, message_bound(n));
    if (a.rows_carried != !big) fail("rows carried", n, rank, 0, a.rows_carried, !big);
    const uint16_t *got = (const uint16_t *)carried;
    for (int r = 0; r < n; r++) {
        if (sizes_out[r] != carried_rows_of(r, n, big)) fail("carried counts", n, rank, r, sizes_out[r], carried_rows_of(r, n, big));
        for (int i = 0; !big && i < carried_rows_of(r, n, big) * 3; i++, got++)
            if (*got != (uint16_t)(r << 10 | i)) {
                fail("carried rows", n, rank, r, *got, (uint16_t)(r << 10 | i));
                break;
            }
    }
}

/* The judge on a table made by hand: sizes that vary are not compared, rows are. */
static void sizes_vary_judge(void) {
    float data[16] = {0};
    mlc_tensor t[3] = {{data, NULL, 3, 0, 0}, {data, NULL, 9, 0, 0}, {data, NULL, 6, 0, 0}};
    const size_t bytes = mlc_signature_bytes();
    char *slots = calloc(3, bytes);
    mlc_agreement a;
    memset(&a, 0, sizeof a);
    for (int r = 0; r < 3; r++) {
        int64_t starts[2] = {0, t[r].count};
        mlc_sign_input in = plain_input(&t[r], starts);
        in.sizes_vary = 1;
        in.row_elements = 3;
        mlc_sign(&in, 0, (mlc_signature *)(slots + r * bytes));
    }
    if (mlc_judge(slots, bytes, 3, 0, 0, &a) != MLC_OK) fail(a.message, 3, -1, 0, 1, 0);
    int64_t starts[2] = {0, 3};
    mlc_sign_input in = plain_input(&t[0], starts); /* rank 2 did not say its sizes vary */
    mlc_sign(&in, 0, (mlc_signature *)(slots + 2 * bytes));
    if (mlc_judge(slots, bytes, 3, 0, 0, &a) != MLC_ERR_MISMATCH ||
        !strstr(a.message, "ranks 0-1 submitted 1 tensor, rows of 3 float32") ||
        !strstr(a.message, "rank 2 submitted 1 tensor, 3 float32 elements (average)"))
        fail(a.message, 3, -1, 1, 0, 0);
    free(slots);
}

/* A rank whose own check of its arguments failed (odd: every rank but rank 0; all:
 * every rank) signs it: every rank fails with MLC_ERR_ARG, naming each such rank and
 * what was wrong, even where all ranks are wrong alike (equal digests). */
static void bad_args_rank(job *j, int rank, mlc_tp *tp) {
    const int all = *(int *)j->arg;
    int64_t data[4] = {0};
    mlc_tensor t = {data, NULL, 4, 0, 0};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = plain_input(&t, starts);
    in.kind = MLC_KIND_ALLTOALL;
    in.sizes_vary = 1;
    in.row_elements = 1;
    if (all || rank > 0) {
        in.bad_args = MLC_BAD_SPLITS_SUM;
        in.bad_detail[0] = 5;
        in.bad_detail[1] = 4;
    }
    mlc_agreement a;
    char message[MLC_MSG_LEN], want[128];
    int rc = check_request(tp, &in, &a, message, j);
    if (j->n == 1 && !all) {
        if (rc != MLC_OK) fail(message, j->n, rank, 0, rc, MLC_OK);
        return;
    }
    if (rc != MLC_ERR_ARG || !strstr(message, "invalid alltoall arguments")) fail(message, j->n, rank, 0, rc, MLC_ERR_ARG);
    const int first = all ? 0 : 1; /* the bad ranks: first..n-1, named as one group */
    if (first == j->n - 1) snprintf(want, sizeof want, ": rank %d: splits add up to 5 rows, the input has 4", first);
    else snprintf(want, sizeof want, ": ranks %d-%d: splits add up to 5 rows, the input has 4", first, j->n - 1);
    if (!strstr(message, want)) fail(message, j->n, rank, 1, 0, 0);
    if (!all && !strstr(message, "the other ranks' arguments are valid"))
        fail(message, j->n, rank, 0, 0, 0);
}

/* Rows of 2x3 and of 3x2 elements: the same length, another shape, named. */
static void row_shape_rank(job *j, int rank, mlc_tp *tp) {
    float data[12] = {0};
    mlc_tensor t = {data, NULL, 12, 0, 0};
    int64_t starts[2] = {0, 12};
    const int64_t shape[2][2] = {{2, 3}, {3, 2}};
    mlc_sign_input in = plain_input(&t, starts);
    in.kind = MLC_KIND_ALLGATHER;
    in.sizes_vary = 1;
    in.row_elements = 6;
    in.row_ndim = 2;
    in.row_shape = shape[rank == j->n - 1 && j->n > 1];
    mlc_agreement a;
    char message[MLC_MSG_LEN];
    int rc = check_request(tp, &in, &a, message, j);
    if (j->n == 1) {
        if (rc != MLC_OK) fail(message, j->n, rank, 0, rc, MLC_OK);
        return;
    }
    char want[128];
    snprintf(want, sizeof want, "rank %d submitted 1 tensor, rows of 6 float32 elements of shape (3, 2)", j->n - 1);
    if (rc != MLC_ERR_MISMATCH || !strstr(message, want) || !strstr(message, "elements of shape (2, 3)"))
        fail(message, j->n, rank, 0, rc, MLC_ERR_MISMATCH);
}

/* A direct allreduce of values whose sums round: every rank ends with the same
 * bits, as the tree adds the same two operands on both partners. */
static void direct_bits_rank(job *j, int rank, mlc_tp *tp) {
    float (*results)[37] = j->arg;
    float in[37];
    for (int i = 0; i < 37; i++) in[i] = 0.1f * (float)(rank + 1) + 0.37f * (float)i / (float)(rank + 3);
    mlc_tensor t = {results[rank], in, 37, 0, 0};
    int64_t starts[2] = {0, 37};
    mlc_sign_input sin = plain_input(&t, starts);
    sin.direct = 1;
    sin.algorithm = MLC_ALG_DIRECT;
    mlc_agreement a;
    char message[MLC_MSG_LEN];
    int rc = check_request(tp, &sin, &a, message, j);
    if (rc != MLC_OK || (j->n > 1 && !a.done_by_exchange)) fail(message, j->n, rank, 0, rc, 0);
    if (a.messages > message_bound(j->n)) fail("direct messages", j->n, rank, 0, a.messages, message_bound(j->n));
    double want = 0; /* element 5, to within rounding */
    for (int r = 0; r < j->n; r++) want += 0.1 * (r + 1) + 0.37 * 5 / (r + 3);
    if (fabs(results[rank][5] - want / j->n) > 1e-5) fail("direct average", j->n, rank, 5, results[rank][5], want / j->n);
}

static void nothing_left(job *j, int rank, const char *what);

/* ---- calls that differ: the ranks behind fail, the furthest check again ---- */

typedef struct call_case {
    int marked;      /* steps marked (step, call) or not (the team's call count) */
    int lag0, lagn;  /* how many calls rank 0 and rank n-1 are behind the others */
} call_case;

static int lag_of(const call_case *c, int rank, int n) {
    return rank == 0 ? c->lag0 : rank == n - 1 ? c->lagn : 0;
}

/* Call k (0..lag) of a rank lag calls behind: where it stands. The last is where the
 * others are. */
static mlc_call_id call_at(const call_case *c, int lag, int k) {
    const int64_t behind = lag - k; /* 0 for the last */
    if (c->marked) return (mlc_call_id){7 - behind, behind ? 1 : 0, 0, ""};
    return (mlc_call_id){0, 40 - behind, 0, ""};
}

/* Each rank makes its lag calls that the others skipped, then the call they are all at.
 * The calls behind fail, naming the ranks furthest on and how far; the furthest check
 * again, and the last call of every rank is one exchange, its direct sum exact. */
static void calls_rank(job *j, int rank, mlc_tp *tp) {
    const call_case *c = j->arg;
    const int n = j->n, lag = lag_of(c, rank, n);
    mlc_agree ag;
    mlc_agree_init(&ag);
    if (mlc_agree_open(&ag, tp)) fail("agree open", n, rank, -1, 0, 0);
    float data[3][4];
    mlc_tensor t[3];
    int64_t starts[3][2];
    mlc_agreement a[3];
    for (int k = 0; k <= lag; k++) {
        for (int i = 0; i < 4; i++) data[k][i] = (float)value(rank, i + k);
        t[k] = (mlc_tensor){data[k], NULL, 4, 0, 0};
        starts[k][0] = 0;
        starts[k][1] = 4;
        mlc_sign_input in = plain_input(&t[k], starts[k]);
        in.op = MLC_OP_SUM;
        in.direct = 1;
        in.algorithm = MLC_ALG_DIRECT;
        in.call = call_at(c, lag, k);
        memset(&a[k], 0, sizeof a[k]);
        mlc_agree_register(&ag, &a[k], k + 1, &in);
    }
    char message[MLC_MSG_LEN], want[160];
    for (int k = 0; k <= lag; k++) {
        const int rc = mlc_agree_verdict(&ag, &a[k], message);
        if (k == lag) {
            if (rc != MLC_OK) fail(message, n, rank, k, rc, MLC_OK);
            for (int i = 0; i < 4 && n > 1; i++) {
                double sum = 0;
                for (int r = 0; r < n; r++) sum += value(r, i + lag_of(c, r, n));
                if (data[k][i] != (float)sum) fail("calls: the realigned sum", n, rank, i, data[k][i], sum);
            }
            continue;
        }
        const mlc_call_id mine = call_at(c, lag, k), best = call_at(c, 0, 0);
        if (c->marked)
            snprintf(want, sizeof want, "at step %lld, call 0 on this team, this rank at step %lld, call %lld (%lld step%s behind)",
                     (long long)best.step, (long long)mine.step, (long long)mine.index,
                     (long long)(best.step - mine.step), best.step - mine.step == 1 ? "" : "s");
        else
            snprintf(want, sizeof want, "at call %lld on this team, this rank at call %lld (%lld call%s behind)",
                     (long long)best.index, (long long)mine.index, (long long)(best.index - mine.index),
                     best.index - mine.index == 1 ? "" : "s");
        if (rc != MLC_ERR_MISMATCH || !strstr(message, want)) fail(message, n, rank, k, rc, MLC_ERR_MISMATCH);
    }
    nothing_left(j, rank, "calls: left posted, queued");
    mlc_agree_destroy(&ag);
    atomic_fetch_add(&checks, 1);
}

/* How rank n-1's call differs from the others' in call_kinds_rank. */
enum { MARKS_NO_STEPS, OTHER_THREAD, NO_CALL, UNNAMED_THREAD, MARKS_AND_REQUEST };

/* Rank n-1 marks no steps, calls from another thread, or makes a request of no call (a
 * framework's op) where the others make a call of the API: every rank fails, naming both.
 * A call signed with no thread (a DDP hook's) pairs with the others' named one. Where
 * the unmarked rank's request differs too (a rank out of data making its next call),
 * the message names what each submitted. */
static void call_kinds_rank(job *j, int rank, mlc_tp *tp) {
    const int kind = *(int *)j->arg, last = rank == j->n - 1;
    float data[4] = {0};
    mlc_tensor t = {data, NULL, 4, 0, 0};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = plain_input(&t, starts);
    if (kind == OTHER_THREAD) in.call = (mlc_call_id){3, 0, last ? 2 : 1, ""}, strcpy(in.call.origin_name, last ? "B" : "A");
    else if (kind == UNNAMED_THREAD) in.call = (mlc_call_id){3, 0, last ? 0 : 1, ""}, strcpy(in.call.origin_name, last ? "" : "A");
    else if (kind == MARKS_NO_STEPS || kind == MARKS_AND_REQUEST) in.call = (mlc_call_id){last ? 0 : 3, last ? 5 : 0, 0, ""};
    else in.call = (mlc_call_id){0, last ? 0 : 5, 0, ""};
    if (kind == MARKS_AND_REQUEST) in.op = last ? MLC_OP_MAX : MLC_OP_SUM;
    mlc_agreement a;
    char message[MLC_MSG_LEN], want[96];
    int rc = check_request(tp, &in, &a, message, j);
    if (kind == UNNAMED_THREAD) {
        if (rc != MLC_OK) fail(message, j->n, rank, kind, rc, MLC_OK);
        return;
    }
    if (kind == OTHER_THREAD) snprintf(want, sizeof want, "rank %d called from thread 'B'", j->n - 1);
    else if (kind == MARKS_NO_STEPS) snprintf(want, sizeof want, "rank %d mark no steps", j->n - 1);
    else if (kind == MARKS_AND_REQUEST) snprintf(want, sizeof want, "rank %d submitted 1 tensor, 4 float32 elements (max)", j->n - 1);
    else snprintf(want, sizeof want, "rank %d: an op of a traced or compiled step", j->n - 1);
    if (rc != MLC_ERR_MISMATCH || !strstr(message, want)) fail(message, j->n, rank, kind, rc, MLC_ERR_MISMATCH);
}

/* Ranks whose tensors are alike but for their labels (a front end's names, op, scale
 * factors: mlc_tensor.label), or for their labels and shapes, fail on every rank, naming
 * the ranks apart: rank n-1's label differs where *differs (1; 2: its shape too), else
 * every rank gives the same label and the request goes on. */
static void labels_rank(job *j, int rank, mlc_tp *tp) {
    const int differs = *(int *)j->arg, last = rank == j->n - 1;
    float data[4] = {0};
    mlc_tensor t = {data, NULL, 4, differs == 2 && last ? 7 : 0, differs && last ? 2 : 1};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = plain_input(&t, starts);
    mlc_agreement a;
    char message[MLC_MSG_LEN], want[192];
    int rc = check_request(tp, &in, &a, message, j);
    if (!differs || j->n == 1) {
        if (rc != MLC_OK) fail(message, j->n, rank, differs, rc, MLC_OK);
        return;
    }
    char others[32];
    snprintf(others, sizeof others, j->n == 2 ? "rank 0" : "ranks 0-%d", j->n - 2);
    snprintf(want, sizeof want, "%slabels (ml_comm.horovod: each tensor's name=, the op and the scale factors) "
             "differ between %s and rank %d", differs == 2 ? "shapes (their dimensions) and " : "", others, j->n - 1);
    if (rc != MLC_ERR_MISMATCH || !strstr(message, want)) fail(message, j->n, rank, differs, rc, MLC_ERR_MISMATCH);
}

/* ---- the stall watchdog names the late rank ---- */

typedef struct stall_case {
    int late;        /* the rank that arrives late */
    int not_ready;   /* it registers at once, its inputs come late (a keyed group) */
} stall_case;

typedef struct late_inputs {
    mlc_agree *ag;
    mlc_agreement *a;
    const mlc_sign_input *in;
    mlc_loopback *lb;
    int n, rank;
} late_inputs;

/* The late rank comes once every other rank has announced that it waits (its arrival
 * notice is queued here), and three warning intervals later: by then each has warned,
 * however slowly a loaded machine ran them. A fixed sleep raced with them under load. */
static void arrive_late(mlc_loopback *lb, int n, int rank, double warn) {
    while (mlc_loopback_queued_tag(lb, rank, MLC_AGREE_NOTICE_TAG) < n - 1) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    const double until = mlc_now() + 3 * warn;
    while (mlc_now() < until) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void *give_inputs_late(void *p) {
    late_inputs *l = p;
    arrive_late(l->lb, l->n, l->rank, l->ag->dog.warn);
    mlc_agree_ready(l->ag, l->a, l->in);
    return NULL;
}

static void stall_rank(job *j, int rank, mlc_tp *tp) {
    const stall_case *c = j->arg;
    mlc_agree ag;
    mlc_agree_init(&ag);
    if (mlc_agree_open(&ag, tp)) fail("agree open", j->n, rank, -1, 0, 0);
    ag.dog.warn = 0.3;
    float data[4] = {0};
    mlc_tensor t = {data, NULL, 4, 0, 0};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = plain_input(&t, starts);
    mlc_agreement a;
    memset(&a, 0, sizeof a);
    char message[MLC_MSG_LEN];
    pthread_t helper;
    late_inputs l = {&ag, &a, &in, j->lb, j->n, rank};
    if (rank == c->late && c->not_ready) {
        mlc_agree_register(&ag, &a, 1, NULL);
        pthread_create(&helper, NULL, give_inputs_late, &l);
    } else {
        if (rank == c->late) arrive_late(j->lb, j->n, rank, ag.dog.warn);
        mlc_agree_register(&ag, &a, 1, &in);
    }
    int rc = mlc_agree_verdict(&ag, &a, message);
    if (rank == c->late && c->not_ready) pthread_join(helper, NULL);
    if (rc != MLC_OK) fail(message, j->n, rank, 0, rc, 0);
    pthread_barrier_wait(&j->barrier);
    mlc_agree_cancel(&ag); /* the notice receives a stall left posted */
    if (mlc_loopback_posted(j->lb, rank)) fail("notice receives left posted", j->n, rank, 0, 1, 0);
    mlc_agree_destroy(&ag);
}

/* Runs the stall job with stderr in a file; every rank but the late one must
 * have named it, and the late one nobody (or, not ready, its own inputs). */
static void stall_job(int n, int late, int not_ready) {
    stall_case c = {late, not_ready};
    fflush(stderr);
    int saved = dup(2);
    FILE *log = tmpfile();
    dup2(fileno(log), 2);
    run_job(n, stall_rank, &c);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fseek(log, 0, SEEK_END);
    long size = ftell(log);
    rewind(log);
    char *text = calloc(1, size + 1);
    if (fread(text, 1, size, log) != (size_t)size) fail("reading the stall log", n, -1, 0, 0, 0);
    fclose(log);
    for (int r = 0; r < n; r++) {
        char want[160];
        if (r == late)
            snprintf(want, sizeof want, "rank %d: team 0 request 1 (%s", r, not_ready ? "" : "none");
        else
            snprintf(want, sizeof want, "rank %d: team 0 request 1 (average of 1 float32 tensor, 4 "
                     "elements) has waited", r);
        int found = strstr(text, want) != NULL;
        if (r != late && found) { /* some warning of this rank names the late rank alone */
            char named[64];
            snprintf(named, sizeof named, " for rank %d to reach it\n", late);
            found = 0;
            for (const char *line = strstr(text, want); line && !found; line = strstr(line + 1, want)) {
                const char *at = strstr(line, named), *end = strchr(line, '\n');
                found = at && at + strlen(named) - 1 == end; /* at the end of this line */
            }
        }
        if (r == late && not_ready) {
            snprintf(want, sizeof want, "rank %d: team 0 request 1", r);
            const char *line = strstr(text, want);
            found = line && strstr(line, "for this rank's own inputs") &&
                    strstr(line, "for this rank's own inputs") < strchr(line, '\n');
        } else if (r == late) {
            found = !found; /* the late rank waited for nobody */
        }
        if (!found) {
            fail("stall message", n, r, late, not_ready, 1);
            if (atomic_load(&failures) < 20) fprintf(stderr, "%s", text);
        }
    }
    free(text);
}

/* A tag beyond what every MPI accepts fails on the loopback transport, naming the limit. */
static void tag_limit_rank(job *j, int rank, mlc_tp *tp) {
    char byte = 0;
    mlc_tp_req req;
    if (mlc_tp_isend(tp, &byte, 1, rank, MLC_TP_TAG_UB + 1, &req) != MLC_ERR_MPI || !strstr(tp->message, "outside 0..32767"))
        fail(tp->message, j->n, rank, 0, 0, 1);
    if (mlc_tp_irecv(tp, &byte, 1, rank, -1, &req) != MLC_ERR_MPI) fail("negative tag", j->n, rank, 0, 0, 1);
}

/* ---- collectives of rows: allgatherv, reduce-scatterv, alltoallv ---- */

/* Rank r's rows in the allgather: 0 for rank 0, uneven after; up to 9 pieces of the
 * sanitized build's 40 bytes (a relay beside blocks of more than two pieces once hung). */
static int64_t gather_rows(int r) { return (r * 3) % 4 * 5; }
/* Rank r's split for rank d in the alltoall: some empty, uneven. */
static int64_t split_rows(int r, int d) { return (r + 2 * d) % 3; }
#define ROW 3

/* arg: the rank (an int) that has no output and relays, or NULL: none. */
static void allgatherv_rank(job *j, int rank, mlc_tp *tp) {
    const int n = j->n, relays = j->arg && *(const int *)j->arg == rank;
    int64_t rows[MAX_RANKS], total = 0;
    for (int r = 0; r < n; r++) total += rows[r] = gather_rows(r);
    int64_t *in = malloc((rows[rank] * ROW + 1) * 8), *out = malloc((total * ROW + 1) * 8);
    for (int64_t i = 0; i < rows[rank] * ROW; i++) in[i] = rank * 1000 + i;
    memset(out, 0x7b, (total * ROW + 1) * 8);
    const mlc_rows_call call = {MLC_INT64, 8, MLC_OP_SUM, ROW, (char *)in, relays ? NULL : (char *)out,
                                NULL, rows, 3, NULL, NULL};
    int rc = mlc_algo_find(MLC_ALG_ALLGATHERV_RING)->rows(tp, &call);
    if (rc) fail("allgatherv", n, rank, -1, rc, 0);
    for (int q = 0, k = 0; q < n && !relays; q++) /* a relaying rank keeps nothing */
        for (int64_t i = 0; i < rows[q] * ROW; i++, k++)
            if (out[k] != q * 1000 + i) {
                fail("allgatherv value", n, rank, k, (double)out[k], q * 1000.0 + i);
                q = n;
                break;
            }
    free(in);
    free(out);
    atomic_fetch_add(&checks, 1);
}

typedef struct {
    int dtype, op;
    int64_t rows;
} scatter_case;

static void reduce_scatterv_rank(job *j, int rank, mlc_tp *tp) {
    const scatter_case *c = j->arg;
    const int n = j->n, es = mlc_dtype_size(c->dtype);
    int64_t shares[MAX_RANKS];
    for (int r = 0; r < n; r++) shares[r] = mlc_rows_share(c->rows, n, r);
    const int64_t count = c->rows * ROW, first = mlc_rows_first(c->rows, n, rank) * ROW;
    char *in = malloc((count + 1) * es), *out = malloc((shares[rank] * ROW + 1) * es);
    fill(in, c->dtype, count, rank, c->op);
    memset(out, 0x7b, (shares[rank] * ROW + 1) * es);
    const mlc_rows_call call = {c->dtype, es, c->op, ROW, in, out, NULL, shares, 4, NULL, NULL};
    int rc = mlc_algo_find(MLC_ALG_REDUCE_SCATTERV_RING)->rows(tp, &call);
    if (rc) fail("reduce_scatterv", n, rank, -1, rc, 0);
    for (int64_t i = 0; i < shares[rank] * ROW; i++) {
        double want = expected(c->dtype, c->op, n, first + i), got = element(out, c->dtype, i);
        if (got != want) {
            fail("reduce_scatterv value", n, rank, i, got, want);
            break;
        }
    }
    for (int64_t i = 0; i < count; i++)
        if (element(in, c->dtype, i) != input_element(c->dtype, c->op, rank, i)) {
            fail("reduce_scatterv input changed", n, rank, i, element(in, c->dtype, i), 0);
            break;
        }
    free(in);
    free(out);
    atomic_fetch_add(&checks, 1);
}

static void alltoallv_rank(job *j, int rank, mlc_tp *tp) {
    const int n = j->n;
    int64_t send[MAX_RANKS], recv[MAX_RANKS], sent = 0, received = 0;
    for (int d = 0; d < n; d++) {
        sent += send[d] = split_rows(rank, d);
        received += recv[d] = split_rows(d, rank);
    }
    int32_t *in = malloc((sent * ROW + 1) * 4), *out = malloc((received * ROW + 1) * 4);
    for (int d = 0, k = 0; d < n; d++)
        for (int64_t i = 0; i < send[d] * ROW; i++) in[k++] = rank * 10000 + d * 100 + (int32_t)i;
    memset(out, 0x7b, (received * ROW + 1) * 4);
    const mlc_rows_call call = {MLC_INT32, 4, MLC_OP_SUM, ROW, (char *)in, (char *)out, send, recv, 5, NULL, NULL};
    int rc = mlc_algo_find(MLC_ALG_ALLTOALLV_PAIRWISE)->rows(tp, &call);
    if (rc) fail("alltoallv", n, rank, -1, rc, 0);
    for (int s = 0, k = 0; s < n; s++)
        for (int64_t i = 0; i < recv[s] * ROW; i++, k++)
            if (out[k] != s * 10000 + rank * 100 + i) {
                fail("alltoallv value", n, rank, k, out[k], s * 10000.0 + rank * 100 + i);
                s = n;
                break;
            }
    free(in);
    free(out);
    atomic_fetch_add(&checks, 1);
}

/* ---- a ring's first round sent ahead of the check (algos/ring_ahead.c) ---- */

/* Which ranks send ahead (the others post their receive, if any, only when the ring
 * starts): pattern p of 3. */
static int sends_ahead(int r, int p) { return (r + p) % 3 != 0; }
static int64_t first_piece(int64_t block_bytes) {
    return block_bytes < MLC_RING_PIECE_BYTES ? block_bytes : MLC_RING_PIECE_BYTES;
}

/* After a job: nothing left posted or unreceived at this rank. */
static void nothing_left(job *j, int rank, const char *what) {
    pthread_barrier_wait(&j->barrier);
    if (mlc_loopback_posted(j->lb, rank) || mlc_loopback_queued(j->lb, rank))
        fail(what, j->n, rank, -1, mlc_loopback_posted(j->lb, rank), mlc_loopback_queued(j->lb, rank));
}

typedef struct {
    int pattern, relay; /* relay: the rank without output (-1: none) */
    int dtype, op;      /* the reduce-scatter's */
    int64_t rows;
} ahead_case;

/* The allgather ring with its first round posted ahead by some ranks (the others send
 * nothing ahead): every rank's rows. */
static void allgatherv_ahead_rank(job *j, int rank, mlc_tp *tp) {
    const ahead_case *c = j->arg;
    const int n = j->n, left = (rank + n - 1) % n, right = (rank + 1) % n, relays = c->relay == rank;
    int64_t rows[MAX_RANKS], total = 0;
    for (int r = 0; r < n; r++) total += rows[r] = gather_rows(r);
    int64_t *in = malloc((rows[rank] * ROW + 1) * 8), *out = malloc((total * ROW + 1) * 8);
    for (int64_t i = 0; i < rows[rank] * ROW; i++) in[i] = rank * 1000 + i;
    mlc_ring_ahead ahead = {.buf = malloc(MLC_RING_PIECE_BYTES)};
    const int64_t mine = sends_ahead(rank, c->pattern) ? first_piece(rows[rank] * ROW * 8) : 0;
    if (mlc_ring_ahead_post(tp, &ahead, (const char *)in, mine))
        fail("ahead post", n, rank, -1, 0, 0);
    pthread_barrier_wait(&j->barrier); /* every first round posted: the check's time */
    ahead.expected = sends_ahead(left, c->pattern) ? first_piece(rows[left] * ROW * 8) : 0;
    ahead.right_sent = sends_ahead(right, c->pattern) ? first_piece(rows[right] * ROW * 8) : 0;
    const mlc_rows_call call = {MLC_INT64, 8, MLC_OP_SUM, ROW, (char *)in, relays ? NULL : (char *)out,
                                NULL, rows, 3, NULL, &ahead};
    int rc = mlc_algo_find(MLC_ALG_ALLGATHERV_RING)->rows(tp, &call);
    if (rc) fail("allgatherv ahead", n, rank, -1, rc, 0);
    for (int q = 0, k = 0; q < n && !relays; q++)
        for (int64_t i = 0; i < rows[q] * ROW; i++, k++)
            if (out[k] != q * 1000 + i) {
                fail("allgatherv ahead value", n, rank, k, (double)out[k], q * 1000.0 + i);
                q = n;
                break;
            }
    nothing_left(j, rank, "allgatherv ahead: left posted, queued");
    free(ahead.buf);
    free(in);
    free(out);
    atomic_fetch_add(&checks, 1);
}

/* The reduce-scatter ring likewise: its first block (r-1) of its input goes ahead. */
static void reduce_scatterv_ahead_rank(job *j, int rank, mlc_tp *tp) {
    const ahead_case *c = j->arg;
    const int n = j->n, left = (rank + n - 1) % n, right = (rank + 1) % n, es = mlc_dtype_size(c->dtype);
    int64_t shares[MAX_RANKS];
    for (int r = 0; r < n; r++) shares[r] = mlc_rows_share(c->rows, n, r);
    const int64_t count = c->rows * ROW, first = mlc_rows_first(c->rows, n, rank) * ROW;
    char *in = malloc((count + 1) * es), *out = malloc((shares[rank] * ROW + 1) * es);
    fill(in, c->dtype, count, rank, c->op);
    mlc_buffer staging = {NULL, 0};
    mlc_ring_ahead ahead = {.buf = malloc(MLC_RING_PIECE_BYTES)};
    const int own_block = (rank + n - 1) % n, left_block = (rank + n - 2) % n;
    const int64_t mine = sends_ahead(rank, c->pattern) ? first_piece(shares[own_block] * ROW * es) : 0;
    const char *own = in + mlc_rows_first(c->rows, n, own_block) * ROW * es;
    if (mlc_ring_ahead_post(tp, &ahead, own, mine))
        fail("ahead post", n, rank, -1, 0, 0);
    pthread_barrier_wait(&j->barrier);
    ahead.expected = sends_ahead(left, c->pattern) ? first_piece(shares[left_block] * ROW * es) : 0;
    ahead.right_sent = sends_ahead(right, c->pattern) ? first_piece(shares[rank] * ROW * es) : 0;
    const mlc_rows_call call = {c->dtype, es, c->op, ROW, in, out, NULL, shares, 4, &staging, &ahead};
    int rc = mlc_algo_find(MLC_ALG_REDUCE_SCATTERV_RING)->rows(tp, &call);
    if (rc) fail("reduce_scatterv ahead", n, rank, -1, rc, 0);
    for (int64_t i = 0; i < shares[rank] * ROW && !rc; i++) {
        double want = expected(c->dtype, c->op, n, first + i), got = element(out, c->dtype, i);
        if (got != want) {
            fail("reduce_scatterv ahead value", n, rank, i, got, want);
            break;
        }
    }
    nothing_left(j, rank, "reduce_scatterv ahead: left posted, queued");
    free(staging.data);
    free(ahead.buf);
    free(in);
    free(out);
    atomic_fetch_add(&checks, 1);
}

/* A check that fails while some ranks sent their first piece ahead (pattern as above)
 * and rank n-1 submitted another request: every rank fails, and the exchange completes
 * every first round, so nothing stays posted or unreceived anywhere. */
static void ahead_mismatch_rank(job *j, int rank, mlc_tp *tp) {
    const ahead_case *c = j->arg;
    const int n = j->n;
    float data[4] = {1, 2, 3, 4};
    mlc_tensor t = {data, NULL, 4, 0, 0};
    int64_t starts[2] = {0, 4};
    mlc_sign_input in = plain_input(&t, starts);
    if (rank == n - 1) in.op = MLC_OP_SUM;
    char own[64];
    memset(own, rank, sizeof own);
    mlc_ring_ahead ahead = {.buf = malloc(MLC_RING_PIECE_BYTES)};
    if (sends_ahead(rank, c->pattern)) {
        in.ahead_bytes = first_piece(sizeof own);
        in.ahead = &ahead;
    }
    mlc_agree ag;
    mlc_agree_init(&ag);
    if (mlc_agree_open(&ag, tp)) fail("agree open", n, rank, -1, 0, 0);
    if (mlc_agree_set_ahead_endpoint(&ag, tp)) fail("agree ahead endpoint", n, rank, -1, 0, 0);
    mlc_agreement a;
    memset(&a, 0, sizeof a);
    mlc_agree_register(&ag, &a, 1, &in);
    if (in.ahead && mlc_ring_ahead_post(tp, &ahead, own, in.ahead_bytes))
        fail("ahead post", n, rank, -1, 0, 0);
    char message[MLC_MSG_LEN];
    int rc = mlc_agree_verdict(&ag, &a, message);
    if (rc != MLC_ERR_MISMATCH) fail("ahead mismatch verdict", n, rank, -1, rc, MLC_ERR_MISMATCH);
    const int left = (rank + n - 1) % n;
    if (a.left_ahead != (sends_ahead(left, c->pattern) ? first_piece(sizeof own) : 0))
        fail("ahead mismatch: r-1's bytes", n, rank, -1, (double)a.left_ahead, 0);
    if (ahead.send_posted || ahead.recv_posted) fail("ahead mismatch: still posted", n, rank, -1, 0, 0);
    nothing_left(j, rank, "ahead mismatch: left posted, queued");
    mlc_agree_destroy(&ag);
    free(ahead.buf);
    atomic_fetch_add(&checks, 1);
}

static void ahead_cases(int n) {
    for (int p = 0; p < 3; p++) {
        ahead_case c = {p, -1, 0, 0, 0};
        run_job(n, allgatherv_ahead_rank, &c);
        c.relay = p % n;
        run_job(n, allgatherv_ahead_rank, &c);
        const int64_t rows[] = {1, 2 * n + 1, 37 * n};
        for (unsigned k = 0; k < sizeof rows / sizeof *rows; k++) {
            c = (ahead_case){p, -1, k % 2 ? MLC_FLOAT32 : MLC_INT32, k == 1 ? MLC_OP_AVERAGE : MLC_OP_SUM, rows[k]};
            if (c.op == MLC_OP_AVERAGE && c.dtype == MLC_INT32) c.op = MLC_OP_SUM;
            run_job(n, reduce_scatterv_ahead_rank, &c);
        }
        if (n > 1) run_job(n, ahead_mismatch_rank, &c);
    }
}

static void rows_cases(int n) {
    run_job(n, allgatherv_rank, NULL);
    for (int relay = 0; relay < n; relay++) run_job(n, allgatherv_rank, &relay); /* one rank relays */
    run_job(n, alltoallv_rank, NULL);
    const int64_t rows[] = {0, 1, n - 1, 2 * n + 1, 37};
    for (int dtype = 0; dtype < MLC_NUM_DTYPES; dtype++)
        for (int op = MLC_OP_SUM; op < MLC_NUM_OPS && mlc_dtype_is_reducible(dtype); op++)
            for (unsigned k = 0; k < sizeof rows / sizeof *rows; k++) {
                if (op == MLC_OP_AVERAGE && (dtype == MLC_FLOAT16 || dtype == MLC_BFLOAT16)) continue;
                scatter_case c = {dtype, op, rows[k]};
                run_job(n, reduce_scatterv_rank, &c);
            }
}

/* The cases of the call rule at n ranks. */
static void call_cases(int n) {
    for (int marked = 0; marked < 2; marked++) {
        call_case one = {marked, 1, 0}, two = {marked, 2, 1};
        run_job(n, calls_rank, &one);
        if (n > 2) run_job(n, calls_rank, &two);
    }
    for (int kind = MARKS_NO_STEPS; kind <= MARKS_AND_REQUEST; kind++) run_job(n, call_kinds_rank, &kind);
    for (int differs = 0; differs < 3; differs++) run_job(n, labels_rank, &differs);
}

/* Every rank agrees, three requests in a row (a direct one among them): the verdicts, the
 * direct sum, and at most 2 ceil(log2 n) messages per rank and request. */
static void happy_rank(job *j, int rank, mlc_tp *tp) {
    mlc_agree ag;
    mlc_agree_init(&ag);
    if (mlc_agree_open(&ag, tp)) fail("agree open", j->n, rank, -1, 0, 0);
    float data[3][5];
    mlc_tensor t[3];
    int64_t starts[3][2];
    mlc_agreement a[3];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 5; i++) data[k][i] = (float)value(rank, i);
        t[k] = (mlc_tensor){data[k], NULL, 5, 0, 0};
        starts[k][0] = 0;
        starts[k][1] = 5;
        mlc_sign_input in = plain_input(&t[k], starts[k]);
        in.op = MLC_OP_SUM;
        in.direct = k == 1;
        memset(&a[k], 0, sizeof a[k]);
        mlc_agree_register(&ag, &a[k], k + 1, &in);
    }
    char message[MLC_MSG_LEN];
    for (int k = 0; k < 3; k++) {
        if (mlc_agree_verdict(&ag, &a[k], message) != MLC_OK) fail(message, j->n, rank, k, 0, 0);
        if (a[k].messages > message_bound(j->n)) fail("happy messages", j->n, rank, k, a[k].messages, message_bound(j->n));
    }
    for (int i = 0; i < 5; i++)
        if (data[1][i] != (float)expected(MLC_FLOAT32, MLC_OP_SUM, j->n, i))
            fail("happy direct sum", j->n, rank, i, data[1][i], expected(MLC_FLOAT32, MLC_OP_SUM, j->n, i));
    nothing_left(j, rank, "happy: left posted, queued");
    mlc_agree_destroy(&ag);
}

/* Past 33 ranks, where a batch of 64 requests once ran out: every failure path of the
 * agreement (a mismatch named, bad arguments, NaN/Inf, the call rule, rings sent ahead
 * completed after a mismatch, the tag limit) and its happy path, at each n given. */
static int scale_main(int argc, char **argv) {
    for (int k = 2; k < argc; k++) {
        const int n = atoi(argv[k]);
        if (n < 2) continue;
        run_job(n, happy_rank, NULL);
        run_job(n, agree_rank, NULL);
        int odd = 0;
        run_job(n, bad_args_rank, &odd);
        run_job(n, nonfinite_rank, NULL);
        call_cases(n);
        for (int p = 0; p < 3; p++) {
            ahead_case c = {p, -1, 0, 0, 0};
            run_job(n, ahead_mismatch_rank, &c);
        }
        run_job(n, tag_limit_rank, NULL);
        printf("loopback_test scale: %d ranks done\n", n);
        fflush(stdout);
    }
    int f = atomic_load(&failures);
    printf("loopback_test scale: %d failures: %s\n", f, f ? "FAILED" : "ok");
    return f ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "scale")) return scale_main(argc, argv);
    int max_ranks = argc > 1 ? atoi(argv[1]) : MAX_RANKS;
    if (max_ranks < 1 || max_ranks > MAX_RANKS) max_ranks = MAX_RANKS;
    int sizes[MAX_RANKS], nsizes = 0; /* 1 to max_ranks, then each further M above the last */
    char said[64];
    int off = snprintf(said, sizeof said, "1-%d", max_ranks);
    while (nsizes < max_ranks) sizes[nsizes] = nsizes + 1, nsizes++;
    for (int k = 2; k < argc && off < (int)sizeof said; k++) {
        const int m = atoi(argv[k]);
        if (m <= sizes[nsizes - 1] || m > MAX_RANKS) continue;
        sizes[nsizes++] = m;
        off += snprintf(said + off, sizeof said - off, ", %d", m);
    }
    for (int i = 0; i < nsizes; i++) {
        const int n = sizes[i];
        allreduce_cases(n);
        rows_cases(n);
        if (n > 1) ahead_cases(n);
        for (int root = 0; root < n; root++) run_job(n, broadcast_rank, &root);
        run_job(n, agree_rank, NULL);
        if (n > 1) run_job(n, agree_compression_rank, NULL);
        for (unsigned k = 0; n > 1 && k < sizeof SETTING_CASES / sizeof *SETTING_CASES; k++)
            run_job(n, settings_rank, (void *)&SETTING_CASES[k]);
        if (n > 1) run_job(n, two_settings_rank, NULL);
        run_job(n, stop_rank, NULL);
        run_job(n, nonfinite_rank, NULL);
        int none = -1, last = n - 1;
        run_job(n, sizes_vary_rank, &none);
        if (n > 1) run_job(n, sizes_vary_rank, &last);
        int odd = 0, all = 1;
        run_job(n, bad_args_rank, &odd);
        run_job(n, bad_args_rank, &all);
        run_job(n, row_shape_rank, NULL);
        int small = 0, big = 1;
        run_job(n, rows_carried_rank, &small);
        run_job(n, rows_carried_rank, &big);
        float results[MAX_RANKS][37];
        run_job(n, direct_bits_rank, results);
        for (int r = 1; r < n; r++)
            if (memcmp(results[0], results[r], sizeof results[0])) fail("direct bits differ", n, r, 0, 0, 0);
        if (n > 1) {
            stall_job(n, n - 1, 0);
            stall_job(n, n / 2, 1);
            call_cases(n);
            run_job(n, happy_rank, NULL);
        }
        run_job(n, tag_limit_rank, NULL);
    }
    sizes_vary_judge();
    run_job(3, failing_send_rank, NULL);
    int f = atomic_load(&failures);
    printf("loopback_test: %s ranks, %ld allreduce cases, %d failures: %s\n", said, atomic_load(&checks), f,
           f ? "FAILED" : "ok");
    return f ? 1 : 0;
}
