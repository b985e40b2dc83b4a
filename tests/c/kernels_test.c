/* The reduction kernels (csrc/base/reduce.c) against one-element-at-a-time
 * reference arithmetic, bit for bit: sums in and out of place, and the fused
 * average at power-of-two and other rank counts (where the power-of-two case
 * multiplies by 1/n instead of dividing). Inputs mix ordinary values,
 * subnormals, huge values that overflow to infinity, and signed zeros; sizes
 * below and above the size where results bypass the caches, and outputs on and
 * off a 16-byte boundary (the streaming loop's scalar head).
 * tests/unit/test_kernels.py builds it with the CPU-dispatched kernels and with
 * the baseline ones (-DMLC_NO_CLONES): both must match the reference, so ranks
 * on CPUs of different widths get the same bits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static uint64_t rng_state = 88172645463325252ull;

static uint64_t next_random(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double awkward_value(void) {
    static const double specials[] = {0.0, -0.0, 1e-40, -3e-39, 1e-310, 3e38, -3.3e38, 1.7e308, 1.0};
    uint64_t r = next_random();
    if (r % 4 == 0) return specials[(r >> 8) % (sizeof specials / sizeof specials[0])];
    return ((double)(int64_t)(next_random() >> 11) / (double)(1ull << 40)) * (double)((r >> 8) % 1000);
}

static int failures;

#define CHECK_TYPE(T, DT, NAME)                                                               \
    static void check_##NAME(int64_t n, int nranks, int shift) {                               \
        T *xb = malloc((n + 1) * sizeof(T)), *yb = malloc((n + 1) * sizeof(T));                \
        T *db = malloc((n + 1) * sizeof(T)), *ref = malloc((n + 1) * sizeof(T));               \
        T *x = xb + shift, *y = yb, *d = db + shift;                                           \
        for (int64_t i = 0; i < n; i++) {                                                      \
            x[i] = (T)awkward_value();                                                         \
            y[i] = (T)awkward_value();                                                         \
        }                                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                      \
            volatile T s = x[i] + y[i];                                                        \
            ref[i] = s;                                                                        \
        }                                                                                      \
        mlc_reduce_sum_to(d, x, y, n, DT);                                                     \
        if (memcmp(d, ref, n * sizeof(T))) failures++, printf("FAIL %s sum_to n=%ld\n", #NAME, (long)n); \
        memcpy(d, x, n * sizeof(T));                                                           \
        mlc_reduce_sum_into(d, y, n, DT);                                                      \
        if (memcmp(d, ref, n * sizeof(T))) failures++, printf("FAIL %s sum_into n=%ld\n", #NAME, (long)n); \
        for (int64_t i = 0; i < n; i++) {                                                      \
            volatile T s = x[i] + y[i];                                                        \
            volatile T q = (T)nranks;                                                          \
            ref[i] = s / q;                                                                    \
        }                                                                                      \
        mlc_reduce_sum_average_to(d, x, y, n, DT, nranks);                                     \
        if (memcmp(d, ref, n * sizeof(T)))                                                     \
            failures++, printf("FAIL %s average_to n=%ld ranks=%d\n", #NAME, (long)n, nranks); \
        memcpy(d, x, n * sizeof(T));                                                           \
        mlc_reduce_sum_average_to(d, d, y, n, DT, nranks);                                     \
        if (memcmp(d, ref, n * sizeof(T)))                                                     \
            failures++, printf("FAIL %s average in place n=%ld ranks=%d\n", #NAME, (long)n, nranks); \
        memcpy(d, x, n * sizeof(T));                                                           \
        mlc_reduce_sum_into(d, y, n, DT);                                                      \
        mlc_divide_by_ranks(d, n, DT, nranks);                                                 \
        if (memcmp(d, ref, n * sizeof(T)))                                                     \
            failures++, printf("FAIL %s divide n=%ld ranks=%d\n", #NAME, (long)n, nranks);     \
        free(xb), free(yb), free(db), free(ref);                                                  \
    }
CHECK_TYPE(float, MLC_FLOAT32, float32)
CHECK_TYPE(double, MLC_FLOAT64, float64)

int main(void) {
    static const int64_t counts[] = {0, 1, 3, 15, 16, 17, 63, 64, 65, 1000, 4097, 100003, 300007};
    static const int ranks[] = {2, 3, 4, 5, 6, 7, 8, 12, 16, 1024};
    int cases = 0;
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++)
            for (int shift = 0; shift < 2; shift++, cases += 2) {
                check_float32(counts[c], ranks[r], shift);
                check_float64(counts[c], ranks[r], shift);
            }
    printf("%d cases, %d failures%s\n", cases, failures, failures ? "" : ": ok");
    return failures != 0;
}
