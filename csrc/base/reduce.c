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

#define SUM_LOOP(T)                                                   \
    do {                                                              \
        T *restrict d = dst;                                          \
        const T *restrict s = src;                                    \
        for (int64_t i = 0; i < n; i++) d[i] += s[i];                 \
    } while (0)

void mlc_reduce_sum_into(void *dst, const void *src, int64_t n, int dtype) {
    switch (dtype) {
    case MLC_FLOAT32: SUM_LOOP(float); break;
    case MLC_FLOAT64: SUM_LOOP(double); break;
    case MLC_INT32: {
        /* Wrap-around like NumPy instead of signed-overflow undefined behaviour. */
        uint32_t *restrict d = dst;
        const uint32_t *restrict s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
        break;
    }
    case MLC_INT64: {
        uint64_t *restrict d = dst;
        const uint64_t *restrict s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
        break;
    }
    case MLC_FLOAT16: {
        _Float16 *restrict d = dst;
        const _Float16 *restrict s = src;
        for (int64_t i = 0; i < n; i++) d[i] = (_Float16)((float)d[i] + (float)s[i]);
        break;
    }
    case MLC_BFLOAT16: {
        uint16_t *restrict d = dst;
        const uint16_t *restrict s = src;
        for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + bf16_to_f32(s[i]));
        break;
    }
    }
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
