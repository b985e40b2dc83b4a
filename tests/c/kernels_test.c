/* The reduction kernels (csrc/base/reduce.c, reduce_ops.c) against one-element-at-a-time
 * reference arithmetic, bit for bit: integers of every width under every op, and for
 * float32 and float64 sums in and out of place, and the fused
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

/* Integers of every width: sums and products wrap around (computed here in uint64_t
 * and cut to the width, as NumPy does), averages truncate toward zero, min and max
 * compare signed types as signed. Inputs cover the whole range of the type. */
#define CHECK_INTEGER(T, DT, NAME)                                                            \
    static void check_##NAME(int64_t n, int nranks) {                                          \
        T *x = malloc((n + 1) * sizeof(T)), *y = malloc((n + 1) * sizeof(T));                  \
        T *d = malloc((n + 1) * sizeof(T)), *ref = malloc((n + 1) * sizeof(T));               \
        for (int64_t i = 0; i < n; i++) {                                                      \
            uint64_t a = next_random(), b = next_random();                                     \
            memcpy(&x[i], &a, sizeof(T));                                                      \
            memcpy(&y[i], &b, sizeof(T));                                                      \
        }                                                                                      \
        const int ops[] = {MLC_OP_SUM, MLC_OP_AVERAGE, MLC_OP_MIN, MLC_OP_MAX, MLC_OP_PRODUCT}; \
        for (int k = 0; k < 5; k++) {                                                          \
            const int op = ops[k];                                                             \
            for (int64_t i = 0; i < n; i++) {                                                  \
                uint64_t s = (uint64_t)x[i] + (uint64_t)y[i];                                  \
                uint64_t p = (uint64_t)x[i] * (uint64_t)y[i];                                  \
                T sum, product;                                                                \
                memcpy(&sum, &s, sizeof(T));                                                   \
                memcpy(&product, &p, sizeof(T));                                               \
                ref[i] = op == MLC_OP_SUM       ? sum                                          \
                         : op == MLC_OP_AVERAGE ? (T)(sum / nranks)                            \
                         : op == MLC_OP_MIN     ? (x[i] < y[i] ? x[i] : y[i])                  \
                         : op == MLC_OP_MAX     ? (x[i] > y[i] ? x[i] : y[i])                  \
                                                : product;                                     \
            }                                                                                  \
            if (op == MLC_OP_AVERAGE) mlc_reduce_sum_average_to(d, x, y, n, DT, nranks);       \
            else mlc_reduce_op_to(d, x, y, n, DT, op);                                         \
            if (memcmp(d, ref, n * sizeof(T)))                                                 \
                failures++, printf("FAIL %s op %d n=%ld ranks=%d\n", #NAME, op, (long)n, nranks); \
            memcpy(d, x, n * sizeof(T));                                                       \
            if (op == MLC_OP_AVERAGE) {                                                        \
                mlc_reduce_sum_into(d, y, n, DT);                                              \
                mlc_divide_by_ranks(d, n, DT, nranks);                                         \
            } else {                                                                           \
                mlc_reduce_op_to(d, d, y, n, DT, op);                                          \
            }                                                                                  \
            if (memcmp(d, ref, n * sizeof(T)))                                                 \
                failures++, printf("FAIL %s op %d in place n=%ld ranks=%d\n", #NAME, op, (long)n, nranks); \
        }                                                                                      \
        free(x), free(y), free(d), free(ref);                                                  \
    }
CHECK_INTEGER(uint8_t, MLC_UINT8, uint8)
CHECK_INTEGER(int8_t, MLC_INT8, int8)
CHECK_INTEGER(uint16_t, MLC_UINT16, uint16)
CHECK_INTEGER(int16_t, MLC_INT16, int16)
CHECK_INTEGER(int32_t, MLC_INT32, int32)
CHECK_INTEGER(int64_t, MLC_INT64, int64)

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
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++, cases += 6) {
            check_uint8(counts[c], ranks[r]);
            check_int8(counts[c], ranks[r]);
            check_uint16(counts[c], ranks[r]);
            check_int16(counts[c], ranks[r]);
            check_int32(counts[c], ranks[r]);
            check_int64(counts[c], ranks[r]);
        }
    printf("%d cases, %d failures%s\n", cases, failures, failures ? "" : ": ok");
    return failures != 0;
}
