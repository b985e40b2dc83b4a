/* Threaded test of the C core alone (no Python), built by tools/sanitizers.py
 * with -fsanitize=thread (or address) and run under mpiexec at several rank counts.
 *
 * Several application threads drive several teams at once, mixing blocking,
 * asynchronous (wait) and callback completion, fused and single buffers, ring and
 * the latency path, every dtype; results are checked exactly. Also: settings written
 * while requests are planned, steps that fail part-way (cancelled groups, on every
 * rank and on one), groups reporting each tensor reduced, setters given no team, finalize while another thread submits, a
 * team whose communication thread fails to start, and messages left queued on a
 * communicator being freed.
 * Exit 0 on success. */
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "team/team.h"

#define NTEAMS 3
#define ROUNDS 12

static int rank, size;
static atomic_int failures;
static mlc_team *teams[NTEAMS];

static int64_t value(int r, int64_t i, int round) { return ((i * 7 + r * 3 + round) % 11) - 5; }

static double expected_sum(int64_t i, int round) {
    double s = 0;
    for (int r = 0; r < size; r++) s += value(r, i, round);
    return s;
}

static void fail(const char *what, int team, int64_t i, double got, double want) {
    if (atomic_fetch_add(&failures, 1) < 10)
        fprintf(stderr, "rank %d team %d: %s wrong at %lld: got %g want %g\n", rank, team, what,
                (long long)i, got, want);
}

typedef struct { atomic_int done; } flag_t;
static void on_done(void *user, int status) {
    flag_t *f = user;
    atomic_store(&f->done, status == MLC_OK ? 1 : -1);
}

/* A keyed group whose tensors arrive from two producer threads, last first,
 * the way a framework's ops deliver gradients during backprop. */
enum { GROUP_N = 5 };
static const int64_t group_counts[GROUP_N] = {3, 700, 0, 5000, 1};
typedef struct {
    mlc_team *team;
    int64_t key;
    int first, step;
    float *src[GROUP_N], *dst[GROUP_N];
    atomic_int *done_count;
    int *failed;
} producer_t;

static void on_tensor_done(void *user, int status) {
    atomic_fetch_add((atomic_int *)user, status == MLC_OK ? 1 : 1000);
}

static void *produce(void *arg) {
    producer_t *p = arg;
    char err[256];
    for (int i = p->first; i >= 0; i -= p->step) {
        if (mlc_team_group_arrive(p->team, p->key, GROUP_N, group_counts, MLC_FLOAT32, MLC_OP_SUM, i,
                                  p->src[i], p->dst[i], on_tensor_done, p->done_count, err, sizeof err)) {
            fprintf(stderr, "rank %d: %s\n", rank, err);
            *p->failed = 1;
        }
    }
    return NULL;
}

static void group_round(mlc_team *team, int t, int round) {
    atomic_int done_count = 0;
    int failed = 0;
    producer_t a = {team, 1000 + t, GROUP_N - 1, 2, {0}, {0}, &done_count, &failed}, b = a;
    b.first = GROUP_N - 2;
    for (int i = 0; i < GROUP_N; i++) {
        a.src[i] = malloc((group_counts[i] + 1) * sizeof(float));
        a.dst[i] = malloc((group_counts[i] + 1) * sizeof(float));
        for (int64_t j = 0; j < group_counts[i]; j++) a.src[i][j] = (float)value(rank, j + i, round);
        b.src[i] = a.src[i];
        b.dst[i] = a.dst[i];
    }
    pthread_t pa, pb;
    pthread_create(&pa, NULL, produce, &a);
    pthread_create(&pb, NULL, produce, &b);
    pthread_join(pa, NULL);
    pthread_join(pb, NULL);
    while (!failed && atomic_load(&done_count) < GROUP_N) sched_yield();
    if (failed || atomic_load(&done_count) != GROUP_N) fail("group done count", t, -1, atomic_load(&done_count), GROUP_N);
    for (int i = 0; i < GROUP_N; i++) {
        for (int64_t j = 0; j < group_counts[i]; j++)
            if (a.dst[i][j] != (float)expected_sum(j + i, round)) { fail("group sum", t, j, a.dst[i][j], expected_sum(j + i, round)); break; }
        free(a.src[i]);
        free(a.dst[i]);
    }
}

static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Keyed groups whose last tensors to arrive are empty, or that are all empty:
 * the data is complete before the group is, and the late arrivals must still
 * find the group alive (a use after free under AddressSanitizer otherwise). */
static void empty_last_round(mlc_team *team, int t) {
    static const int64_t layouts[2][3] = {{6, 0, 0}, {0, 0, 0}};
    char err[MLC_MSG_LEN];
    for (int l = 0; l < 2; l++) {
        atomic_int done_count = 0;
        float src[6], dst[6] = {0};
        for (int j = 0; j < 6; j++) src[j] = (float)(rank + j);
        for (int i = 0; i < 3; i++) {
            if (mlc_team_group_arrive(team, 7000 + 10 * t + l, 3, layouts[l], MLC_FLOAT32, MLC_OP_SUM, i,
                                      src, dst, on_tensor_done, &done_count, err, sizeof err))
                fail(err, t, i, 0, 0);
            sleep_ms(20); /* let the reduction finish before the empty tensors arrive */
        }
        while (atomic_load(&done_count) < 3) sched_yield();
        if (atomic_load(&done_count) != 3) fail("empty-last group done", t, l, atomic_load(&done_count), 3);
        for (int j = 0; l == 0 && j < 6; j++) {
            double want = size * (size - 1) / 2.0 + (double)size * j;
            if (dst[j] != (float)want) fail("empty-last group sum", t, j, dst[j], want);
        }
    }
}

/* Switching the timeline on and off while blocking calls run on their callers'
 * threads (they record events too): ThreadSanitizer finds a race if the switch
 * does not wait for them. */
static atomic_int drivers_left;
static void *timeline_toggler(void *arg) {
    mlc_team *team = arg;
    for (int i = 0; atomic_load(&drivers_left) > 0; i++) {
        mlc_team_timeline_enable(team, i % 2 ? 0 : 256); /* MLC_ERR_STATE while busy: fine */
        sched_yield();
    }
    return NULL;
}

/* Writing the teams' settings (their current values: every rank must keep the same)
 * while other threads plan requests: ThreadSanitizer reports a race if the setters
 * do not take the lock that planning holds. */
static void *settings_writer(void *arg) {
    while (atomic_load(&drivers_left) > 0) {
        for (int t = 0; t < NTEAMS; t++) {
            mlc_team_settings s;
            mlc_team_get_settings(teams[t], &s);
            if (mlc_team_set_algorithm(teams[t], s.algorithm) ||
                mlc_team_set_inline_threshold(teams[t], s.inline_bytes) ||
                mlc_team_set_rabenseifner_threshold(teams[t], s.rabenseifner_bytes) ||
                mlc_team_set_latency_threshold(teams[t], s.latency_bytes) ||
                mlc_team_set_compression(teams[t], s.compression))
                fail("a setter refused the team's own value", t, -1, 0, 0);
        }
        sleep_ms(1);
    }
    return NULL;
}

/* Ranks that disagree (agree/): every rank gets MLC_ERR_MISMATCH naming both
 * layouts, on the inline path, the threads' path and a broadcast, and the team
 * goes on in step. */
static void mismatch_round(mlc_team *team, int t) {
    char err[MLC_MSG_LEN];
    float small[16] = {0};
    int rc = mlc_team_allreduce_buffer(team, small, 8 + (rank == 1), MLC_FLOAT32, MLC_OP_SUM, err, sizeof err);
    if (rc != MLC_ERR_MISMATCH || !strstr(err, "rank 1 submitted 1 tensor, 9 float32"))
        fail(err, t, -1, rc, MLC_ERR_MISMATCH);
    int64_t n = 3000 + (rank == 0);
    float *buf = calloc(n, sizeof *buf);
    mlc_tensor two[2] = {{buf, NULL, 1000, 0, 0}, {buf + 1000, NULL, n - 1000, 0, 0}};
    mlc_request *req;
    if (mlc_team_allreduce_async(team, two, 2, MLC_FLOAT32, MLC_OP_AVERAGE, NULL, NULL, &req)) fail("submit", t, -1, 0, 0);
    else {
        rc = mlc_request_wait(req);
        if (rc != MLC_ERR_MISMATCH || !strstr(mlc_request_message(req), "rank 0 submitted 2 tensors, 3001"))
            fail(mlc_request_message(req), t, -1, rc, MLC_ERR_MISMATCH);
        mlc_request_free(req);
    }
    mlc_tensor one = {buf, NULL, 10, 0, 0};
    rc = mlc_team_broadcast(team, &one, 1, MLC_FLOAT32, rank == 0 ? 0 : 1, err, sizeof err);
    if (rc != MLC_ERR_MISMATCH || !strstr(err, "broadcast from rank 1")) fail(err, t, -1, rc, MLC_ERR_MISMATCH);
    free(buf);
}

/* With the finite check on: a NaN on one rank fails the request on every rank,
 * naming that rank and tensor, for a fused request and for a keyed group. */
static void nonfinite_round(mlc_team *team, int t, int round) {
    int bad_rank = round % size, bad_tensor = 1 + round % 2;
    float data[3][40];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 40; j++) data[i][j] = (float)j;
    if (rank == bad_rank) data[bad_tensor][round % 40] = round % 3 ? 1.0f / 0.0f : 0.0f / 0.0f;
    mlc_tensor three[3] = {{data[0], NULL, 40, 0, 0}, {data[1], NULL, 40, 0, 0}, {data[2], NULL, 40, 0, 0}};
    mlc_request *req;
    int who = -1, which = -1;
    if (mlc_team_allreduce_async(team, three, 3, MLC_FLOAT32, MLC_OP_SUM, NULL, NULL, &req)) fail("submit", t, -1, 0, 0);
    else {
        int rc = mlc_request_wait(req);
        if (rc != MLC_ERR_NONFINITE || mlc_request_nonfinite(req, &who, &which) != 1 || who != bad_rank ||
            which != bad_tensor)
            fail(mlc_request_message(req), t, who, which, bad_tensor);
        mlc_request_free(req);
    }
    /* The same through a keyed group, arriving from this thread. */
    atomic_int done_count = 0;
    int64_t counts[3] = {40, 40, 40};
    char err[MLC_MSG_LEN];
    for (int i = 2; i >= 0; i--)
        if (mlc_team_group_arrive(team, 5000 + t, 3, counts, MLC_FLOAT32, MLC_OP_SUM, i, data[i], data[i],
                                  on_tensor_done, &done_count, err, sizeof err))
            fail(err, t, -1, 0, 0);
    /* on_tensor_done adds 1 per success, 1000 per failure: wait for three calls */
    while (atomic_load(&done_count) % 1000 + atomic_load(&done_count) / 1000 < 3) sched_yield();
    if (atomic_load(&done_count) != 3 * 1000) fail("group nonfinite", t, -1, atomic_load(&done_count), 3000);
}

/* A step that fails after part of its group arrived, on every rank at a different
 * point (rank r submits tensors 0..r%2 of 3): each rank cancels its open group; the
 * next group of the same key must get its own request and be exact. */
static void cancel_round(mlc_team *team, int t) {
    static const int64_t counts[3] = {700, 5, 900};
    char err[MLC_MSG_LEN];
    const int64_t key = 9000 + t;
    float src[3][900], dst[3][900];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 900; j++) src[i][j] = (float)(rank + i + j);
    atomic_int done_count = 0;
    for (int i = 0; i <= rank % 2; i++)
        if (mlc_team_group_arrive(team, key, 3, counts, MLC_FLOAT32, MLC_OP_SUM, i, src[i], dst[i],
                                  on_tensor_done, &done_count, err, sizeof err))
            fail(err, t, i, 0, 0);
    if (mlc_team_group_cancel(team, key, 0, &done_count) != MLC_OK) fail("cancel", t, -1, 0, 1);
    /* The cancelled request still ends (its arrived tensors hear of it) */
    while (atomic_load(&done_count) < rank % 2 + 1) sched_yield();
    atomic_int clean_count = 0;
    for (int i = 2; i >= 0; i--)
        if (mlc_team_group_arrive(team, key, 3, counts, MLC_FLOAT32, MLC_OP_SUM, i, src[i], dst[i],
                                  on_tensor_done, &clean_count, err, sizeof err))
            fail(err, t, i, 0, 0);
    while (atomic_load(&clean_count) < 3) sched_yield();
    if (atomic_load(&clean_count) != 3) fail("group after a cancelled one", t, -1, atomic_load(&clean_count), 3);
    for (int i = 0; i < 3; i++)
        for (int64_t j = 0; j < counts[i]; j++) {
            double want = size * (size - 1) / 2.0 + (double)size * (i + j);
            if (dst[i][j] != (float)want) { fail("group after a cancelled one", t, j, dst[i][j], want); break; }
        }
}

static void *driver(void *arg) {
    int t = (int)(intptr_t)arg;
    mlc_team *team = teams[t];
    char err[256];
    for (int round = 0; round < ROUNDS; round++) {
        /* float32 sum, large enough for the ring path, blocking */
        int64_t n = 20000 + round * 37 + t;
        float *a = malloc(n * sizeof *a);
        for (int64_t i = 0; i < n; i++) a[i] = (float)value(rank, i, round);
        mlc_tensor one = {a, NULL, n, 0, 0};
        if (mlc_team_allreduce(team, &one, 1, MLC_FLOAT32, MLC_OP_SUM, err, sizeof err)) fail(err, t, -1, 0, 0);
        for (int64_t i = 0; i < n; i++)
            if (a[i] != (float)expected_sum(i, round)) { fail("f32 sum", t, i, a[i], expected_sum(i, round)); break; }

        /* fused float64 average of three tensors, out of place, asynchronous with wait */
        int64_t n1 = 5 + round, n2 = 3000, n3 = 11;
        double *src = malloc((n1 + n2 + n3) * sizeof *src), *dst = malloc((n1 + n2 + n3) * sizeof *dst);
        for (int64_t i = 0; i < n1 + n2 + n3; i++) src[i] = (double)value(rank, i, round);
        mlc_tensor three[3] = {{dst, src, n1, 0, 0}, {dst + n1, src + n1, n2, 0, 0}, {dst + n1 + n2, src + n1 + n2, n3, 0, 0}};
        mlc_request *req;
        if (mlc_team_allreduce_async(team, three, 3, MLC_FLOAT64, MLC_OP_AVERAGE, NULL, NULL, &req)) fail("submit", t, -1, 0, 0);
        else {
            if (mlc_request_wait(req)) fail(mlc_request_message(req), t, -1, 0, 0);
            mlc_request_free(req);
        }
        for (int64_t i = 0; i < n1 + n2 + n3; i++)
            if (dst[i] != expected_sum(i, round) / size) { fail("f64 avg", t, i, dst[i], expected_sum(i, round) / size); break; }

        /* int32 sum with a callback, polled with test */
        int32_t small[9];
        for (int i = 0; i < 9; i++) small[i] = (int32_t)value(rank, i, round);
        mlc_tensor st = {small, NULL, 9, 0, 0};
        flag_t flag = {0};
        if (mlc_team_allreduce_async(team, &st, 1, MLC_INT32, MLC_OP_SUM, on_done, &flag, &req)) fail("submit", t, -1, 0, 0);
        else {
            while (mlc_request_test(req) == MLC_PENDING) {}
            mlc_request_free(req);
            if (atomic_load(&flag.done) != 1) fail("callback", t, -1, 0, 0);
        }
        for (int i = 0; i < 9; i++)
            if (small[i] != (int32_t)expected_sum(i, round)) { fail("i32 sum", t, i, small[i], expected_sum(i, round)); break; }

        /* broadcast from a rotating root */
        int root = (round + t) % size;
        int64_t nb = 4001;
        int64_t *b = malloc(nb * sizeof *b);
        for (int64_t i = 0; i < nb; i++) b[i] = rank * 100000 + i;
        mlc_tensor bt = {b, NULL, nb, 0, 0};
        if (mlc_team_broadcast(team, &bt, 1, MLC_INT64, root, err, sizeof err)) fail(err, t, -1, 0, 0);
        for (int64_t i = 0; i < nb; i++)
            if (b[i] != root * 100000 + i) { fail("bcast", t, i, (double)b[i], root * 100000.0 + i); break; }
        free(a); free(src); free(dst); free(b);
        group_round(team, t, round);
        if (size > 1 && round % 4 == t) mismatch_round(team, t);
        if (t == 0) nonfinite_round(team, t, round);
        if (round == 0) empty_last_round(team, t);
        if (round == 1) cancel_round(team, t);
    }
    atomic_fetch_sub(&drivers_left, 1);
    return NULL;
}

/* on_tensor_done adds 1 per success, 1000 per failure: wait until `expected` tensors are
 * told, and fail unless every one of them failed. */
static void expect_all_failed(atomic_int *done_count, int expected, const char *what) {
    while (atomic_load(done_count) % 1000 + atomic_load(done_count) / 1000 < expected) sched_yield();
    if (atomic_load(done_count) != 1000 * expected) fail(what, -1, -1, atomic_load(done_count), 1000 * expected);
}

/* The team's next request (a sum of 1, 2, 3 on every rank) is exact: this rank pairs with
 * the others again. */
static void expect_next_request_exact(mlc_team *team, const char *what) {
    char err[MLC_MSG_LEN] = "";
    float x[3] = {1, 2, 3};
    mlc_tensor one = {x, NULL, 3, 0, 0};
    if (mlc_team_allreduce(team, &one, 1, MLC_FLOAT32, MLC_OP_SUM, err, sizeof err)) fail(err[0] ? err : what, -1, -1, 0, 0);
    for (int i = 0; i < 3; i++)
        if (x[i] != (float)((i + 1) * size)) fail(what, -1, i, x[i], (i + 1) * size);
}

/* Only rank 0's step fails, after its first tensor: its group is cancelled. The
 * group fails on every rank (its seal, or with the finite check its own agreement
 * check, tells them), naming rank 0; no rank gets the sums in which rank 0's missing
 * tensor was zeros; the next request is exact. */
static void cancel_on_one_rank(mlc_context *ctx, int finite) {
    static const int64_t counts[2] = {300, 4000};
    char err[MLC_MSG_LEN] = "";
    mlc_team *team;
    if (mlc_team_create(ctx, 2, 4096, 512, &team, err, sizeof err)) { fail(err, -1, -1, 0, 0); return; }
    mlc_team_set_checks(team, 1, finite);
    static float src[2][4000], dst[2][4000];
    atomic_int done_count = 0;
    const int arrive = rank == 0 ? 1 : 2;
    for (int i = 0; i < arrive; i++)
        if (mlc_team_group_arrive(team, 1, 2, counts, MLC_FLOAT32, MLC_OP_SUM, i, src[i], dst[i],
                                  on_tensor_done, &done_count, err, sizeof err))
            fail(err, -1, i, 0, 0);
    if (rank == 0 && mlc_team_group_cancel(team, 1, 0, &done_count) != MLC_OK) fail("cancel", -1, -1, 0, 1);
    expect_all_failed(&done_count, arrive, "the cancelled group failed on this rank too");
    mlc_team_last_error(team, err, sizeof err);
    const char *named = rank == 0 ? "failed on this rank" : finite ? "rank 0 submitted" : "failed on rank 0";
    if (!strstr(err, named)) fail(err[0] ? err : "no message", -1, -1, 0, 0);
    expect_next_request_exact(team, "the request after the cancelled group");
    mlc_team_destroy(team);
}

/* A group opened before its tensors (a framework's step start): rank 0's step fails
 * before any tensor arrived, so rank 0 cancels it by its opener id; every rank's group
 * fails, the others' naming rank 0, and the next group of the same key is exact. */
static void cancel_opened_before_any_tensor(mlc_context *ctx) {
    static const int64_t counts[2] = {300, 4000};
    char err[MLC_MSG_LEN] = "";
    mlc_team *team;
    if (mlc_team_create(ctx, 2, 4096, 512, &team, err, sizeof err)) { fail(err, -1, -1, 0, 0); return; }
    static float src[2][4000], dst[2][4000];
    for (int round = 0; round < 2; round++) {
        atomic_int done_count = 0;
        int64_t opener = 0;
        if (mlc_team_group_open_part(team, 7, 2, counts, NULL, NULL, MLC_FLOAT32, MLC_OP_SUM, 0, 1, 0, 100 + round,
                                     &opener, err, sizeof err) || opener <= 0)
            fail(err[0] ? err : "no opener id", -1, round, opener, 1);
        const int fails = round == 0 && rank == 0;
        if (fails && mlc_team_group_cancel_opened(team, opener) != MLC_OK) fail("cancel_opened", -1, -1, 0, 1);
        for (int i = 0; i < 2 && !fails; i++) {
            for (int k = 0; k < counts[i]; k++) src[i][k] = (float)(rank + k % 7);
            if (mlc_team_group_arrive_part(team, 7, 2, counts, NULL, NULL, MLC_FLOAT32, MLC_OP_SUM, 0, 1, 0, i, 100 + round,
                                           src[i], dst[i], on_tensor_done, &done_count, err, sizeof err))
                fail(err, -1, i, 0, 0);
        }
        if (fails) {
            mlc_team_last_error(team, err, sizeof err);
            if (!strstr(err, "failed on this rank")) fail(err[0] ? err : "no message", -1, -1, 0, 0);
            if (mlc_team_group_cancel_opened(team, opener) != MLC_ERR_STATE) fail("a second cancel", -1, -1, 0, 1);
            continue;
        }
        while (atomic_load(&done_count) % 1000 + atomic_load(&done_count) / 1000 < 2) sched_yield();
        if (round == 0) {
            if (atomic_load(&done_count) != 2000) fail("the group rank 0 cancelled", -1, -1, atomic_load(&done_count), 2000);
            mlc_team_last_error(team, err, sizeof err);
            if (!strstr(err, "failed on rank 0")) fail(err[0] ? err : "no message", -1, -1, 0, 0);
            continue;
        }
        if (atomic_load(&done_count) != 2) fail("the next group", -1, -1, atomic_load(&done_count), 2);
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < counts[i]; k++)
                if (dst[i][k] != (float)(size * (size - 1) / 2 + size * (k % 7))) {
                    fail("the next group's sum", i, k, dst[i][k], size * (size - 1) / 2 + size * (k % 7));
                    break;
                }
    }
    mlc_team_destroy(team);
}

/* Rank 0's step fails after its first tensor, and its second tensor's op, running
 * already, arrives after the cancel: that arrival fails and opens no second group of
 * the step, so the next request pairs with the other ranks' next request and is exact. */
static void late_tensor_of_a_cancelled_step(mlc_context *ctx) {
    static const int64_t counts[2] = {300, 4000};
    char err[MLC_MSG_LEN] = "";
    mlc_team *team;
    if (mlc_team_create(ctx, 2, 4096, 512, &team, err, sizeof err)) { fail(err, -1, -1, 0, 0); return; }
    static float src[2][4000], dst[2][4000];
    atomic_int done_count = 0;
    const int64_t key = 13, step = 400;
    const int before_cancel = rank == 0 ? 1 : 2;
    for (int i = 0; i < before_cancel; i++)
        if (mlc_team_group_arrive_part(team, key, 2, counts, NULL, NULL, MLC_FLOAT32, MLC_OP_SUM, 0, 1, 0, i, step,
                                       src[i], dst[i], on_tensor_done, &done_count, err, sizeof err))
            fail(err, -1, i, 0, 0);
    if (rank == 0) {
        if (mlc_team_group_cancel(team, key, 0, &done_count) != MLC_OK) fail("cancel", -1, -1, 0, 1);
        err[0] = '\0';
        const int rc = mlc_team_group_arrive_part(team, key, 2, counts, NULL, NULL, MLC_FLOAT32, MLC_OP_SUM, 0, 1, 0, 1,
                                                  step, src[1], dst[1], on_tensor_done, &done_count, err, sizeof err);
        if (rc != MLC_ERR_STATE || !strstr(err, "after its step was cancelled"))
            fail(err[0] ? err : "the late tensor was taken", -1, 1, rc, MLC_ERR_STATE);
    }
    expect_all_failed(&done_count, before_cancel, "the cancelled group");
    expect_next_request_exact(team, "the request after the late tensor");
    mlc_team_destroy(team);
}

/* A watched group (mlc_team_group_watch): each non-empty tensor is reported once, with
 * its sum already in place, and at more than one rank before the done callbacks (they
 * wait for the seal); an empty one is not reported (its done callback runs at arrival); a watch needs an open group. */
typedef struct {
    atomic_int reported[3], wrong, early;
    atomic_int *done_count;
    float (*dst)[4000];
    const int64_t *counts;
} watch_t;

static void on_reduced(void *user, int index) {
    watch_t *w = user;
    atomic_fetch_add(&w->reported[index], 1);
    if (atomic_load(w->done_count) > 1) atomic_store(&w->early, 1); /* the empty one's: at its arrival */
    for (int64_t k = 0; k < w->counts[index]; k++)
        if (w->dst[index][k] != (float)(size * (size - 1) / 2 + size * (k % 3))) atomic_store(&w->wrong, 1);
}

static void watched_group_reports_each_tensor(mlc_context *ctx) {
    static const int64_t counts[3] = {300, 4000, 0};
    char err[MLC_MSG_LEN] = "";
    mlc_team *team;
    if (mlc_team_create(ctx, 2, 4096, 512, &team, err, sizeof err)) { fail(err, -1, -1, 0, 0); return; }
    static float src[3][4000], dst[3][4000];
    atomic_int done_count = 0;
    watch_t w = {.done_count = &done_count, .dst = dst, .counts = counts};
    int64_t opener = 0;
    if (mlc_team_group_open_part(team, 11, 3, counts, NULL, NULL, MLC_FLOAT32, MLC_OP_SUM, 0, 1, 0, 300, &opener, err,
                                 sizeof err))
        fail(err, -1, -1, 0, 0);
    if (mlc_team_group_watch(team, opener, on_reduced, &w) != MLC_OK) fail("watch", -1, -1, 0, 1);
    for (int i = 2; i >= 0; i--) { /* the empty one first */
        for (int k = 0; k < counts[i]; k++) src[i][k] = (float)(rank + k % 3);
        if (mlc_team_group_arrive_part(team, 11, 3, counts, NULL, NULL, MLC_FLOAT32, MLC_OP_SUM, 0, 1, 0, i, 300, src[i],
                                       dst[i], on_tensor_done, &done_count, err, sizeof err))
            fail(err, -1, i, 0, 0);
    }
    const double until = MPI_Wtime() + 30;
    while (atomic_load(&done_count) < 3 && MPI_Wtime() < until) sched_yield();
    if (atomic_load(&done_count) != 3) fail("the watched group's done callbacks", -1, -1, atomic_load(&done_count), 3);
    for (int i = 0; i < 3; i++)
        if (atomic_load(&w.reported[i]) != (counts[i] > 0))
            fail("reports of a tensor reduced", -1, i, atomic_load(&w.reported[i]), counts[i] > 0);
    if (atomic_load(&w.wrong)) fail("a sum when reported reduced", -1, -1, 1, 0);
    if (atomic_load(&w.early)) fail("a done callback before the seal", -1, -1, 1, 0);
    if (mlc_team_group_watch(team, opener, on_reduced, &w) != MLC_ERR_STATE) fail("watch of a finished group", -1, -1, 0, 1);
    mlc_team_destroy(team);
}

/* An opener that a framework runs late, after some or all of its step's tensors (they
 * do not wait for it): it claims the group they opened, or opens nothing once that group
 * is complete, so no stray group holds up the team's next request. Step 1: the opener
 * between the two tensors; step 2: after both; step 3: before both. Sums exact. */
static void opener_after_its_tensors(mlc_context *ctx) {
    static const int64_t counts[2] = {300, 4000};
    char err[MLC_MSG_LEN] = "";
    mlc_team *team;
    if (mlc_team_create(ctx, 2, 4096, 512, &team, err, sizeof err)) { fail(err, -1, -1, 0, 0); return; }
    static float src[2][4000], dst[2][4000];
    for (int step = 1; step <= 3; step++) {
        atomic_int done_count = 0;
        int64_t opener = -1;
        int opened_at = step == 1 ? 1 : step == 2 ? 2 : 0; /* tensors that came before it */
        for (int i = 0; i <= 2; i++) {
            if (i == opened_at &&
                mlc_team_group_open_part(team, 9, 2, counts, NULL, NULL, MLC_FLOAT32, MLC_OP_SUM, 0, 1, 0, 200 + step,
                                         &opener, err, sizeof err))
                fail(err, -1, step, 0, 0);
            if (i == 2) break;
            for (int k = 0; k < counts[i]; k++) src[i][k] = (float)(rank + step + k % 5);
            if (mlc_team_group_arrive_part(team, 9, 2, counts, NULL, NULL, MLC_FLOAT32, MLC_OP_SUM, 0, 1, 0, i, 200 + step,
                                           src[i], dst[i], on_tensor_done, &done_count, err, sizeof err))
                fail(err, -1, i, 0, 0);
        }
        /* Claimed or opened: an id; after a complete group: none. */
        if ((step == 2) != (opener == 0) || opener < 0) fail("the opener id", -1, step, opener, step == 2 ? 0 : 1);
        const double until = MPI_Wtime() + 30;
        while (atomic_load(&done_count) < 2 && MPI_Wtime() < until) sched_yield();
        if (atomic_load(&done_count) != 2) {
            fail("the step's group (a stray group ahead of it?)", -1, step, atomic_load(&done_count), 2);
            break; /* its threads may still hold the buffers: leave them */
        }
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < counts[i]; k++) {
                const float want = (float)(size * (size - 1) / 2 + size * (step + k % 5));
                if (dst[i][k] != want) {
                    fail("the step's sum", i, k, dst[i][k], want);
                    break;
                }
            }
        if (opener > 0 && mlc_team_group_cancel_opened(team, opener) != MLC_ERR_STATE)
            fail("cancel after the group completed", -1, step, 0, 1);
    }
    mlc_team_destroy(team);
}

/* The core starts its threads through this (tools/sanitizers.py defines
 * MLC_PTHREAD_CREATE): while fail_thread_in > 0, the call that brings it to 0 fails. */
static atomic_int fail_thread_in;

int mlc_test_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
    if (atomic_load(&fail_thread_in) > 0 && atomic_fetch_sub(&fail_thread_in, 1) == 1) return EAGAIN;
    return pthread_create(thread, attr, start, arg);
}

/* Communicator ids still free on this rank: MPICH has a few thousand; each communicator
 * takes one. Counted by duplicating MPI_COMM_SELF until that fails (then all freed). */
static int free_communicator_ids(void) {
    enum { MOST = 8192 };
    static MPI_Comm made[MOST];
    int count = 0;
    MPI_Comm self;
    MPI_Comm_dup(MPI_COMM_SELF, &self);
    MPI_Comm_set_errhandler(self, MPI_ERRORS_RETURN);
    while (count < MOST && MPI_Comm_dup(self, &made[count]) == MPI_SUCCESS) count++;
    for (int i = 0; i < count; i++) MPI_Comm_free(&made[i]);
    MPI_Comm_free(&self);
    return count;
}

/* A team whose second thread fails to start: the error says so, and every
 * communicator the team had made (its first thread's included) is freed: 100 failed
 * teams leave as many communicator ids free as before (a team that leaked even one
 * communicator would take 100). */
static void failed_thread_start_frees_communicators(mlc_context *ctx) {
    char err[MLC_MSG_LEN];
    const int before = free_communicator_ids();
    for (int i = 0; i < 100; i++) {
        mlc_team *team = NULL;
        err[0] = '\0';
        atomic_store(&fail_thread_in, 2);
        int rc = mlc_team_create(ctx, 3, 4096, 512, &team, err, sizeof err);
        if (rc != MLC_ERR_NOMEM || team || !strstr(err, "pthread_create")) {
            fail(err[0] ? err : "a team whose thread failed to start", -1, i, rc, MLC_ERR_NOMEM);
            if (team) mlc_team_destroy(team);
            return;
        }
    }
    const int after = free_communicator_ids();
    if (after < before - 10) fail("communicator ids the failed teams kept", -1, -1, before - after, 0);
    atomic_store(&fail_thread_in, 0);
    mlc_team *team;
    if (mlc_team_create(ctx, 3, 4096, 512, &team, err, sizeof err)) {
        fail(err, -1, -1, 0, 0);
        return;
    }
    float x[3] = {1, 2, 3};
    mlc_tensor one = {x, NULL, 3, 0, 0};
    if (mlc_team_allreduce(team, &one, 1, MLC_FLOAT32, MLC_OP_SUM, err, sizeof err)) fail(err, -1, -1, 0, 0);
    for (int i = 0; i < 3; i++)
        if (x[i] != (float)((i + 1) * size)) fail("the team after failed ones", -1, i, x[i], (i + 1) * size);
    mlc_team_destroy(team);
}

/* finalize on one thread while another submits: the submitting thread holds the
 * team (mlc_team_acquire) around each call, and finds it through a registry that
 * the finalizing thread empties first, as the TensorFlow ops do. Under
 * AddressSanitizer a call into the freed team would be reported. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static mlc_team *registered;
static atomic_int submits_done;

static void *submit_until_gone(void *arg) {
    static const int64_t counts[2] = {0, 1000};
    char err[MLC_MSG_LEN];
    for (int64_t key = 1;; key++) {
        pthread_mutex_lock(&registry_lock);
        mlc_team *team = registered;
        int rc = team ? mlc_team_acquire(team) : MLC_ERR_STATE;
        pthread_mutex_unlock(&registry_lock);
        if (rc != MLC_OK) break;
        sleep_ms(2); /* an op between finding its team and using it: destroy may start */
        /* an empty first tensor opens a group whose data never comes: no messages */
        rc = mlc_team_group_arrive(team, key, 2, counts, MLC_FLOAT32, MLC_OP_SUM, 0, NULL, NULL,
                                   NULL, NULL, err, sizeof err);
        if (rc != MLC_OK && rc != MLC_ERR_STATE) fail(err, -1, key, rc, 0);
        if (rc == MLC_ERR_STATE && !strstr(err, "shut down")) fail(err, -1, key, rc, 0);
        mlc_team_release(team);
        atomic_fetch_add(&submits_done, 1);
        sched_yield();
    }
    return NULL;
}

static void finalize_while_submitting(mlc_context *ctx) {
    char err[MLC_MSG_LEN];
    mlc_team *team;
    if (mlc_team_create(ctx, 2, 4096, 512, &team, err, sizeof err)) { fail(err, -1, -1, 0, 0); return; }
    mlc_team_set_checks(team, 0, 0);
    registered = team;
    atomic_store(&submits_done, 0);
    pthread_t th;
    pthread_create(&th, NULL, submit_until_gone, NULL);
    while (atomic_load(&submits_done) < 20) sched_yield();
    pthread_mutex_lock(&registry_lock);
    registered = NULL;
    pthread_mutex_unlock(&registry_lock);
    mlc_team_destroy(team); /* may run while the other thread is inside a call */
    pthread_join(th, NULL);
}

/* Setters refuse a NULL team (an error code, no crash). */
static void null_team_setters(void) {
    if (mlc_team_set_algorithm(NULL, MLC_ALG_AUTO) != MLC_ERR_ARG ||
        mlc_team_set_inline_threshold(NULL, 0) != MLC_ERR_ARG ||
        mlc_team_set_rabenseifner_threshold(NULL, 0) != MLC_ERR_ARG ||
        mlc_team_set_latency_threshold(NULL, 0) != MLC_ERR_ARG ||
        mlc_team_set_compression(NULL, 0) != MLC_ERR_ARG || mlc_team_acquire(NULL) != MLC_ERR_ARG ||
        mlc_team_group_cancel(NULL, 1, 0, NULL) != MLC_ERR_ARG)
        fail("a setter accepted a NULL team", -1, -1, 0, MLC_ERR_ARG);
}

/* Messages left queued on a communicator (a request one rank started and ended
 * unmatched when the session closed) are received before the team frees it: a
 * later communicator given the same context id must not see them. */
static void stale_messages_are_drained(void) {
    enum { SENT = 3 };
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (rank == 1)
        for (int i = 0; i < SENT; i++) MPI_Send(&i, 1, MPI_INT, 0, 7 + i, comm);
    if (rank == 0) {
        int seen = 0; /* the last one queued: the earlier ones are too (non-overtaking) */
        double until = MPI_Wtime() + 10;
        while (!seen && MPI_Wtime() < until) MPI_Iprobe(1, 7 + SENT - 1, comm, &seen, MPI_STATUS_IGNORE);
        int drained = mlc_comm_drain(comm), left = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &left, MPI_STATUS_IGNORE);
        if (drained != SENT || left) fail("messages drained", -1, left, drained, SENT);
    }
    MPI_Comm_free(&comm);
}

int main(int argc, char **argv) {
    int provided;
    char err[256];
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm world = MPI_COMM_WORLD;
    mlc_context *ctx = mlc_context_create((uintptr_t)&world, err, sizeof err);
    if (!ctx) { fprintf(stderr, "%s\n", err); return 1; }
    rank = mlc_context_rank(ctx);
    size = mlc_context_size(ctx);
    for (int t = 0; t < NTEAMS; t++) {
        /* small chunks and a small fusion buffer: many segments, streamed fusion */
        if (mlc_team_create(ctx, 1 + t % 3, 4096, 512, &teams[t], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        mlc_team_set_latency_threshold(teams[t], 1024);
    }
    mlc_team_set_checks(teams[0], 1, 1); /* team 0 also scans for NaN/Inf */
    /* Small requests: the direct allreduce inside the check on team 0 (the default),
     * recursive doubling on team 1, every size forced through it on team 2. */
    mlc_team_set_direct_threshold(teams[1], 0);
    mlc_team_set_algorithm(teams[2], MLC_ALG_RECURSIVE_DOUBLING);
    pthread_t th[NTEAMS], toggler;
    atomic_store(&drivers_left, NTEAMS);
    for (int t = 0; t < NTEAMS; t++) pthread_create(&th[t], NULL, driver, (void *)(intptr_t)t);
    pthread_create(&toggler, NULL, timeline_toggler, teams[1]);
    pthread_t writer;
    pthread_create(&writer, NULL, settings_writer, NULL);
    for (int t = 0; t < NTEAMS; t++) pthread_join(th[t], NULL);
    pthread_join(toggler, NULL);
    pthread_join(writer, NULL);
    for (int t = 0; t < NTEAMS; t++) mlc_team_destroy(teams[t]);
    null_team_setters();
    if (size > 1) {
        cancel_on_one_rank(ctx, 0);
        cancel_on_one_rank(ctx, 1);
        cancel_opened_before_any_tensor(ctx);
        late_tensor_of_a_cancelled_step(ctx);
        opener_after_its_tensors(ctx);
        watched_group_reports_each_tensor(ctx);
        stale_messages_are_drained();
    }
    finalize_while_submitting(ctx);
    failed_thread_start_frees_communicators(ctx);
    mlc_context_destroy(ctx);
    int local = atomic_load(&failures), total = 0;
    MPI_Allreduce(&local, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("threads_test: %d ranks, %d teams x %d rounds: %s\n", size, NTEAMS, ROUNDS, total ? "FAILED" : "ok");
    MPI_Finalize();
    return total ? 1 : 0;
}
