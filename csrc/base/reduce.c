/* Element-wise kernels for the reductions: dst += src, dst = a + b, and the
 * division of an average. Half types are computed in float32 and rounded to
 * nearest-even once per addition; integer averages truncate toward zero (C
 * division, as Horovod's average of integers, a double scale truncated, gives).
 *
 * The 32- and 64-bit loops are built for several instruction sets
 * (target_clones: plain x86-64, AVX2, AVX-512) and the loader picks the widest
 * the CPU has: the core is built without -march, so that one build runs on any
 * node of a cluster, and the SSE2 baseline alone leaves a third to a half of
 * these loops' speed unused. Every clone does the same IEEE additions and
 * divisions (no contraction: nothing here multiplies and adds), so ranks on
 * different CPUs still get the same bits. The half-type loops are not cloned:
 * with AVX512-FP16 a compiler may add halves natively, which rounds once where
 * the baseline rounds twice. */
#include <string.h>

#include "base.h"

/* Integers wrap around like NumPy (unsigned arithmetic) instead of signed-overflow
 * undefined behaviour. restrict: the compiler may vectorise without overlap checks;
 * in place (dst is a) has its own loop so that promise holds. */
#define WIDE_SUM_KERNELS(NAME, T)                                                         \
    MLC_VECTOR_CLONES static void add_into_##NAME(T *restrict d, const T *restrict y,     \
                                                  int64_t n) {                            \
        for (int64_t i = 0; i < n; i++) d[i] = d[i] + y[i];                               \
    }                                                                                     \
    MLC_VECTOR_CLONES static void add_to_##NAME(T *restrict d, const T *restrict x,       \
                                                const T *restrict y, int64_t n) {         \
        for (int64_t i = 0; i < n; i++) d[i] = x[i] + y[i];                               \
    }
WIDE_SUM_KERNELS(f32, float)
WIDE_SUM_KERNELS(f64, double)
WIDE_SUM_KERNELS(u32, uint32_t)
WIDE_SUM_KERNELS(u64, uint64_t)
/* 8- and 16-bit integers: C adds them as int, the store wraps them to their width. */
WIDE_SUM_KERNELS(u8, uint8_t)
WIDE_SUM_KERNELS(u16, uint16_t)

/* Integer averages: the sum divided by the ranks, truncated toward zero. */
#define INTEGER_DIVIDE_KERNEL(NAME, T)                                                    \
    static void divide_##NAME(T *d, int64_t n, int q) {                                  \
        for (int64_t i = 0; i < n; i++) d[i] = (T)(d[i] / q);                             \
    }
INTEGER_DIVIDE_KERNEL(i32, int32_t)
INTEGER_DIVIDE_KERNEL(i64, int64_t)
INTEGER_DIVIDE_KERNEL(u8, uint8_t)
INTEGER_DIVIDE_KERNEL(i8, int8_t)
INTEGER_DIVIDE_KERNEL(u16, uint16_t)
INTEGER_DIVIDE_KERNEL(i16, int16_t)

/* Floating-point average kernels: (x + y) / q, and the division alone. Dividing by
 * a power of two is exact scaling, so it is done as a multiplication by 1/q (the
 * same bits, several times faster); any other q is divided, which gives the
 * correctly rounded quotient users can predict. */
#define FLOAT_AVERAGE_KERNELS(NAME, T)                                                    \
    MLC_VECTOR_CLONES static void add_divide_##NAME(T *restrict d, const T *restrict x,   \
                                                    const T *restrict y, int64_t n, T q,  \
                                                    int exact_inverse) {                  \
        if (exact_inverse) {                                                              \
            const T inv = (T)1 / q;                                                       \
            for (int64_t i = 0; i < n; i++) d[i] = (x[i] + y[i]) * inv;                   \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++) d[i] = (x[i] + y[i]) / q;                     \
        }                                                                                 \
    }                                                                                     \
    MLC_VECTOR_CLONES static void add_divide_into_##NAME(T *restrict d, const T *restrict y, \
                                                         int64_t n, T q, int exact_inverse) { \
        if (exact_inverse) {                                                              \
            const T inv = (T)1 / q;                                                       \
            for (int64_t i = 0; i < n; i++) d[i] = (d[i] + y[i]) * inv;                   \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++) d[i] = (d[i] + y[i]) / q;                     \
        }                                                                                 \
    }                                                                                     \
    MLC_VECTOR_CLONES static void divide_##NAME(T *restrict d, int64_t n, T q,            \
                                                int exact_inverse) {                      \
        if (exact_inverse) {                                                              \
            const T inv = (T)1 / q;                                                       \
            for (int64_t i = 0; i < n; i++) d[i] = d[i] * inv;                            \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++) d[i] = d[i] / q;                              \
        }                                                                                 \
    }
FLOAT_AVERAGE_KERNELS(f32, float)
FLOAT_AVERAGE_KERNELS(f64, double)

/* Out of place on buffers larger than the caches: the result is stored around the
 * caches (non-temporal stores), so the processor does not first read every output
 * line it is about to overwrite; that read is a quarter of the loop's memory
 * traffic. Memory, not arithmetic, bounds these loops, so 128-bit SSE2 (every
 * x86-64 has it) suffices, and it does the same IEEE operations as the other
 * loops. The fence makes the stores visible before the caller hands the block
 * to the transport. */
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define MLC_STREAM_MIN_BYTES (1 << 20)

static void add_divide_stream_f32(float *d, const float *x, const float *y, int64_t n, float q,
                                  int divide, int exact_inverse) {
    const float inv = 1.0f / q;
    int64_t i = 0;
    for (; i < n && ((uintptr_t)(d + i) & 15); i++) {
        float s = x[i] + y[i];
        d[i] = !divide ? s : exact_inverse ? s * inv : s / q;
    }
    const __m128 vq = _mm_set1_ps(q), vinv = _mm_set1_ps(inv);
    for (; i + 4 <= n; i += 4) {
        __m128 s = _mm_add_ps(_mm_loadu_ps(x + i), _mm_loadu_ps(y + i));
        if (divide) s = exact_inverse ? _mm_mul_ps(s, vinv) : _mm_div_ps(s, vq);
        _mm_stream_ps(d + i, s);
    }
    for (; i < n; i++) {
        float s = x[i] + y[i];
        d[i] = !divide ? s : exact_inverse ? s * inv : s / q;
    }
    _mm_sfence();
}

static void add_divide_stream_f64(double *d, const double *x, const double *y, int64_t n,
                                  double q, int divide, int exact_inverse) {
    const double inv = 1.0 / q;
    int64_t i = 0;
    for (; i < n && ((uintptr_t)(d + i) & 15); i++) {
        double s = x[i] + y[i];
        d[i] = !divide ? s : exact_inverse ? s * inv : s / q;
    }
    const __m128d vq = _mm_set1_pd(q), vinv = _mm_set1_pd(inv);
    for (; i + 2 <= n; i += 2) {
        __m128d s = _mm_add_pd(_mm_loadu_pd(x + i), _mm_loadu_pd(y + i));
        if (divide) s = exact_inverse ? _mm_mul_pd(s, vinv) : _mm_div_pd(s, vq);
        _mm_stream_pd(d + i, s);
    }
    for (; i < n; i++) {
        double s = x[i] + y[i];
        d[i] = !divide ? s : exact_inverse ? s * inv : s / q;
    }
    _mm_sfence();
}
#define MLC_HAVE_STREAM 1
#endif

static int is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

/* Half types: dst = a + b (or dst += b when dst is a: the same loop reads d first). */
static void add_f16(_Float16 *d, const _Float16 *x, const _Float16 *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = (_Float16)((float)x[i] + (float)y[i]);
}

static void add_bf16(uint16_t *d, const uint16_t *x, const uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = mlc_f32_to_bf16(mlc_bf16_to_f32(x[i]) + mlc_bf16_to_f32(y[i]));
}

void mlc_reduce_sum_into(void *dst, const void *src, int64_t n, int dtype) {
    switch (dtype) {
    case MLC_FLOAT32: add_into_f32(dst, src, n); break;
    case MLC_FLOAT64: add_into_f64(dst, src, n); break;
    case MLC_INT32: add_into_u32(dst, src, n); break;
    case MLC_INT64: add_into_u64(dst, src, n); break;
    case MLC_UINT8:
    case MLC_INT8: add_into_u8(dst, src, n); break;
    case MLC_UINT16:
    case MLC_INT16: add_into_u16(dst, src, n); break;
    case MLC_FLOAT16: add_f16(dst, dst, src, n); break;
    case MLC_BFLOAT16: add_bf16(dst, dst, src, n); break;
    }
}

void mlc_reduce_sum_to(void *dst, const void *a, const void *b, int64_t n, int dtype) {
    if (dst == a) {
        mlc_reduce_sum_into(dst, b, n, dtype);
        return;
    }
#ifdef MLC_HAVE_STREAM
    if (n * mlc_dtype_size(dtype) >= MLC_STREAM_MIN_BYTES) {
        if (dtype == MLC_FLOAT32) return add_divide_stream_f32(dst, a, b, n, 1.0f, 0, 0);
        if (dtype == MLC_FLOAT64) return add_divide_stream_f64(dst, a, b, n, 1.0, 0, 0);
    }
#endif
    switch (dtype) {
    case MLC_FLOAT32: add_to_f32(dst, a, b, n); break;
    case MLC_FLOAT64: add_to_f64(dst, a, b, n); break;
    case MLC_INT32: add_to_u32(dst, a, b, n); break;
    case MLC_INT64: add_to_u64(dst, a, b, n); break;
    case MLC_UINT8:
    case MLC_INT8: add_to_u8(dst, a, b, n); break;
    case MLC_UINT16:
    case MLC_INT16: add_to_u16(dst, a, b, n); break;
    case MLC_FLOAT16: add_f16(dst, a, b, n); break;
    case MLC_BFLOAT16: add_bf16(dst, a, b, n); break;
    }
}

void mlc_divide_by_ranks(void *buf, int64_t n, int dtype, int nranks) {
    if (nranks == 1) return;
    const int exact = is_power_of_two(nranks);
    switch (dtype) {
    case MLC_FLOAT32: divide_f32(buf, n, (float)nranks, exact); break;
    case MLC_FLOAT64: divide_f64(buf, n, (double)nranks, exact); break;
    case MLC_INT32: divide_i32(buf, n, nranks); break;
    case MLC_INT64: divide_i64(buf, n, nranks); break;
    case MLC_UINT8: divide_u8(buf, n, nranks); break;
    case MLC_INT8: divide_i8(buf, n, nranks); break;
    case MLC_UINT16: divide_u16(buf, n, nranks); break;
    case MLC_INT16: divide_i16(buf, n, nranks); break;
    case MLC_FLOAT16: {
        _Float16 *b = buf;
        float q = (float)nranks;
        for (int64_t i = 0; i < n; i++) b[i] = (_Float16)((float)b[i] / q);
        break;
    }
    case MLC_BFLOAT16: {
        uint16_t *b = buf;
        float q = (float)nranks;
        for (int64_t i = 0; i < n; i++) b[i] = mlc_f32_to_bf16(mlc_bf16_to_f32(b[i]) / q);
        break;
    }
    }
}

/* The last addition of an average and its division in one pass: float32 and
 * float64 in one loop (the same two IEEE operations, so the same bits, as the sum
 * then the division); the other types block by block while the block is in cache. */
#define MLC_AVERAGE_BLOCK 4096

void mlc_reduce_sum_average_to(void *dst, const void *a, const void *b, int64_t n, int dtype,
                               int nranks) {
    const int exact = is_power_of_two(nranks);
    if (nranks > 1 && dtype == MLC_FLOAT32) {
        if (dst == a) add_divide_into_f32(dst, b, n, (float)nranks, exact);
#ifdef MLC_HAVE_STREAM
        else if (n * 4 >= MLC_STREAM_MIN_BYTES) add_divide_stream_f32(dst, a, b, n, (float)nranks, 1, exact);
#endif
        else add_divide_f32(dst, a, b, n, (float)nranks, exact);
        return;
    }
    if (nranks > 1 && dtype == MLC_FLOAT64) {
        if (dst == a) add_divide_into_f64(dst, b, n, (double)nranks, exact);
#ifdef MLC_HAVE_STREAM
        else if (n * 8 >= MLC_STREAM_MIN_BYTES) add_divide_stream_f64(dst, a, b, n, (double)nranks, 1, exact);
#endif
        else add_divide_f64(dst, a, b, n, (double)nranks, exact);
        return;
    }
    const int es = mlc_dtype_size(dtype);
    for (int64_t off = 0; off < n; off += MLC_AVERAGE_BLOCK) {
        int64_t len = n - off < MLC_AVERAGE_BLOCK ? n - off : MLC_AVERAGE_BLOCK;
        char *d = (char *)dst + off * es;
        mlc_reduce_sum_to(d, (const char *)a + off * es, (const char *)b + off * es, len, dtype);
        mlc_divide_by_ranks(d, len, dtype, nranks);
    }
}
