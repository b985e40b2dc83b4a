/* Element-wise kernels for the reductions: dst += src, and the final division
 * of an average. Half types are computed in float32 and rounded to nearest-even
 * once per addition; integer averages truncate toward zero (C division). The
 * loops are plain so the compiler vectorises them. */
#include <string.h>

#include "base.h"

static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* quiet NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(bits >> 16);
}

/* dst = a + b element-wise, in one of two shapes so the compiler may assume no
 * overlap and vectorise without run-time checks: in place (dst is a; b apart) and
 * out of place (three buffers apart). Half types are summed in float32. */
#define SUM_LOOP(T, U, EXPR, IN_PLACE)                              \
    do {                                                            \
        T *restrict d = dst;                                        \
        const T *restrict y = b;                                    \
        if (IN_PLACE) {                                             \
            for (int64_t i = 0; i < n; i++) {                       \
                U xi = d[i], yi = y[i];                             \
                d[i] = EXPR;                                        \
            }                                                       \
        } else {                                                    \
            const T *restrict x = a;                                \
            for (int64_t i = 0; i < n; i++) {                       \
                U xi = x[i], yi = y[i];                             \
                d[i] = EXPR;                                        \
            }                                                       \
        }                                                           \
    } while (0)

#define SUM_ALL(IN_PLACE)                                                                       \
    switch (dtype) {                                                                            \
    case MLC_FLOAT32: SUM_LOOP(float, float, xi + yi, IN_PLACE); break;                         \
    case MLC_FLOAT64: SUM_LOOP(double, double, xi + yi, IN_PLACE); break;                       \
    /* Integers wrap around like NumPy instead of signed-overflow undefined behaviour. */      \
    case MLC_INT32: SUM_LOOP(uint32_t, uint32_t, xi + yi, IN_PLACE); break;                     \
    case MLC_INT64: SUM_LOOP(uint64_t, uint64_t, xi + yi, IN_PLACE); break;                     \
    case MLC_FLOAT16: SUM_LOOP(_Float16, float, (_Float16)(xi + yi), IN_PLACE); break;          \
    case MLC_BFLOAT16:                                                                          \
        SUM_LOOP(uint16_t, uint16_t, f32_to_bf16(bf16_to_f32(xi) + bf16_to_f32(yi)), IN_PLACE); \
        break;                                                                                  \
    }

void mlc_reduce_sum_into(void *dst, const void *src, int64_t n, int dtype) {
    const void *a = dst, *b = src;
    (void)a;
    SUM_ALL(1)
}

void mlc_reduce_sum_to(void *dst, const void *a, const void *b, int64_t n, int dtype) {
    if (dst == a) {
        mlc_reduce_sum_into(dst, b, n, dtype);
        return;
    }
    SUM_ALL(0)
}

void mlc_divide_by_ranks(void *buf, int64_t n, int dtype, int nranks) {
    if (nranks == 1) return;
    switch (dtype) {
    case MLC_FLOAT32: {
        /* Division, not multiplication by 1/n: the result is the correctly rounded
         * quotient, so users can predict it exactly. */
        float *b = buf, q = (float)nranks;
        for (int64_t i = 0; i < n; i++) b[i] /= q;
        break;
    }
    case MLC_FLOAT64: {
        double *b = buf, q = (double)nranks;
        for (int64_t i = 0; i < n; i++) b[i] /= q;
        break;
    }
    case MLC_INT32: {
        int32_t *b = buf;
        for (int64_t i = 0; i < n; i++) b[i] /= nranks;
        break;
    }
    case MLC_INT64: {
        int64_t *b = buf;
        for (int64_t i = 0; i < n; i++) b[i] /= nranks;
        break;
    }
    case MLC_FLOAT16: {
        _Float16 *b = buf;
        float q = (float)nranks;
        for (int64_t i = 0; i < n; i++) b[i] = (_Float16)((float)b[i] / q);
        break;
    }
    case MLC_BFLOAT16: {
        uint16_t *b = buf;
        float q = (float)nranks;
        for (int64_t i = 0; i < n; i++) b[i] = f32_to_bf16(bf16_to_f32(b[i]) / q);
        break;
    }
    }
}

/* The last addition of an average and its division, block by block while the
 * block is in cache: the same operations, so the same bits, as sum then divide,
 * with one pass over memory fewer. */
#define MLC_AVERAGE_BLOCK 4096

void mlc_reduce_sum_average_to(void *dst, const void *a, const void *b, int64_t n, int dtype,
                               int nranks) {
    const int es = mlc_dtype_size(dtype);
    for (int64_t off = 0; off < n; off += MLC_AVERAGE_BLOCK) {
        int64_t len = n - off < MLC_AVERAGE_BLOCK ? n - off : MLC_AVERAGE_BLOCK;
        char *d = (char *)dst + off * es;
        mlc_reduce_sum_to(d, (const char *)a + off * es, (const char *)b + off * es, len, dtype);
        mlc_divide_by_ranks(d, len, dtype, nranks);
    }
}
