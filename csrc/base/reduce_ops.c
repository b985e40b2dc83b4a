/* The reductions other than the sum: element-wise minimum, maximum and product,
 * for every dtype of the table but bool, behind one entry point that the algorithms call
 * with the request's op (sum and average go to reduce.c's adding loops, so the
 * algorithms need no other change). Half types are widened to float32, combined
 * and rounded to nearest-even once per pair; integers multiply with wrap-around
 * (unsigned arithmetic, as NumPy). Minimum and maximum pick one of the two
 * inputs, so they are exact in every type; a NaN in the second operand is kept
 * (x < y is false for NaN, so the order of the operands decides, the same on every
 * rank because every algorithm combines in a fixed order). */
#include "base.h"

#define MIN_OF(x, y) ((x) < (y) ? (x) : (y))
#define MAX_OF(x, y) ((x) > (y) ? (x) : (y))
#define PRODUCT_OF(x, y) ((x) * (y))

/* dst may equal a: every loop reads both operands of an element before writing it. */
#define WIDE_KERNEL(NAME, T, F)                                                            \
    MLC_VECTOR_CLONES static void NAME(T *d, const T *x, const T *y, int64_t n) {          \
        for (int64_t i = 0; i < n; i++) d[i] = F(x[i], y[i]);                              \
    }
#define WIDE_KERNELS(SUFFIX, T)                                                            \
    WIDE_KERNEL(min_##SUFFIX, T, MIN_OF)                                                   \
    WIDE_KERNEL(max_##SUFFIX, T, MAX_OF)                                                   \
    WIDE_KERNEL(product_##SUFFIX, T, PRODUCT_OF)
WIDE_KERNELS(f32, float)
WIDE_KERNELS(f64, double)
WIDE_KERNEL(min_i32, int32_t, MIN_OF)
WIDE_KERNEL(max_i32, int32_t, MAX_OF)
WIDE_KERNEL(min_i64, int64_t, MIN_OF)
WIDE_KERNEL(max_i64, int64_t, MAX_OF)
WIDE_KERNEL(product_u32, uint32_t, PRODUCT_OF)
WIDE_KERNEL(product_u64, uint64_t, PRODUCT_OF)
WIDE_KERNEL(min_u8, uint8_t, MIN_OF)
WIDE_KERNEL(max_u8, uint8_t, MAX_OF)
WIDE_KERNEL(min_i8, int8_t, MIN_OF)
WIDE_KERNEL(max_i8, int8_t, MAX_OF)
WIDE_KERNEL(min_u16, uint16_t, MIN_OF)
WIDE_KERNEL(max_u16, uint16_t, MAX_OF)
WIDE_KERNEL(min_i16, int16_t, MIN_OF)
WIDE_KERNEL(max_i16, int16_t, MAX_OF)
/* C multiplies 8- and 16-bit values as int, where 65535 * 65535 overflows: multiply
 * them as uint32_t and keep the low bits (the same wrap-around as NumPy). */
#define NARROW_PRODUCT_OF(x, y) ((uint32_t)(x) * (uint32_t)(y))
WIDE_KERNEL(product_u8, uint8_t, NARROW_PRODUCT_OF)
WIDE_KERNEL(product_u16, uint16_t, NARROW_PRODUCT_OF)

static float combine(float x, float y, int op) {
    return op == MLC_OP_MIN ? MIN_OF(x, y) : op == MLC_OP_MAX ? MAX_OF(x, y) : x * y;
}

static void halves_f16(_Float16 *d, const _Float16 *x, const _Float16 *y, int64_t n, int op) {
    for (int64_t i = 0; i < n; i++) d[i] = (_Float16)combine((float)x[i], (float)y[i], op);
}

static void halves_bf16(uint16_t *d, const uint16_t *x, const uint16_t *y, int64_t n, int op) {
    for (int64_t i = 0; i < n; i++) d[i] = mlc_f32_to_bf16(combine(mlc_bf16_to_f32(x[i]), mlc_bf16_to_f32(y[i]), op));
}

void mlc_reduce_op_to(void *dst, const void *a, const void *b, int64_t n, int dtype, int op) {
    if (op == MLC_OP_SUM || op == MLC_OP_AVERAGE) {
        mlc_reduce_sum_to(dst, a, b, n, dtype);
        return;
    }
    if (dtype == MLC_FLOAT16) return halves_f16(dst, a, b, n, op);
    if (dtype == MLC_BFLOAT16) return halves_bf16(dst, a, b, n, op);
    switch (dtype * MLC_NUM_OPS + op) {
#define ROW(DT, SUFFIX, PRODUCT)                                                           \
    case DT * MLC_NUM_OPS + MLC_OP_MIN: min_##SUFFIX(dst, a, b, n); break;                 \
    case DT * MLC_NUM_OPS + MLC_OP_MAX: max_##SUFFIX(dst, a, b, n); break;                 \
    case DT * MLC_NUM_OPS + MLC_OP_PRODUCT: PRODUCT(dst, a, b, n); break;
        ROW(MLC_FLOAT32, f32, product_f32)
        ROW(MLC_FLOAT64, f64, product_f64)
        ROW(MLC_INT32, i32, product_u32)
        ROW(MLC_INT64, i64, product_u64)
        ROW(MLC_UINT8, u8, product_u8)
        ROW(MLC_INT8, i8, product_u8)
        ROW(MLC_UINT16, u16, product_u16)
        ROW(MLC_INT16, i16, product_u16)
#undef ROW
    }
}
