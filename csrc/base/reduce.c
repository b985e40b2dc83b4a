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

/* dst = a + b element-wise. dst may be a (in place) but never b; for two distinct
 * buffers and a third output the compiler may assume no overlap at all. */
#define SUM_LOOP(T, U, EXPR)                                        \
    do {                                                            \
        T *d = dst;                                                 \
        const T *x = a;                                             \
        const T *restrict y = b;                                    \
        for (int64_t i = 0; i < n; i++) {                           \
            U xi = x[i], yi = y[i];                                 \
            d[i] = EXPR;                                            \
        }                                                           \
    } while (0)

static void sum(void *dst, const void *a, const void *b, int64_t n, int dtype) {
    switch (dtype) {
    case MLC_FLOAT32: SUM_LOOP(float, float, xi + yi); break;
    case MLC_FLOAT64: SUM_LOOP(double, double, xi + yi); break;
    /* Integers wrap around like NumPy instead of signed-overflow undefined behaviour. */
    case MLC_INT32: SUM_LOOP(uint32_t, uint32_t, xi + yi); break;
    case MLC_INT64: SUM_LOOP(uint64_t, uint64_t, xi + yi); break;
    case MLC_FLOAT16: SUM_LOOP(_Float16, float, (_Float16)(xi + yi)); break;
    case MLC_BFLOAT16: SUM_LOOP(uint16_t, uint16_t, f32_to_bf16(bf16_to_f32(xi) + bf16_to_f32(yi))); break;
    }
}

void mlc_reduce_sum_into(void *dst, const void *src, int64_t n, int dtype) { sum(dst, dst, src, n, dtype); }

void mlc_reduce_sum_to(void *dst, const void *a, const void *b, int64_t n, int dtype) {
    sum(dst, a, b, n, dtype);
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
