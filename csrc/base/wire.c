/* Wire conversions for 16-bit values on the wire (MLC_COMPRESSION_BF16/FP16):
 * float32 sums travel as bfloat16 or float16 and are added in float32.
 *
 * Rounding is to nearest, ties to even, for both formats (the rounding of
 * reduce.c's half types and of NumPy/ml_dtypes' astype), so a test can predict
 * every bit. bfloat16 is the top half of a float32 (float32's range, 8 bits of
 * precision); float16 has 11 bits of precision but a range of +-65504: a larger
 * value becomes +-Inf, which the functions that return int report (1) so the ring
 * can fail the request instead of returning Inf (allgather_ring.c). Values below
 * 2^-24 become 0 in float16 (subnormals are kept above that).
 * The loops are plain so the compiler vectorises them; the flag is an OR over the
 * loop, not an early exit. The bfloat16 loops are built for several instruction
 * sets (MLC_VECTOR_CLONES, base.h): integer bit operations and float32 additions,
 * the same bits on every one; AVX2 about halves the time of the rounding loops against
 * the SSE2 baseline (benchmarks/RESULTS.md). */
#include <string.h>

#include "base.h"

static inline uint16_t to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* quiet NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(bits >> 16);
}

static inline float from_bf16(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* All exponent bits set: NaN or +-Inf. */
static inline int bf16_special(uint16_t h) { return (h & 0x7f80u) == 0x7f80u; }
static inline int fp16_special(uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }

static inline uint16_t to_fp16(float f) {
    _Float16 h = (_Float16)f;
    uint16_t bits;
    memcpy(&bits, &h, sizeof bits);
    return bits;
}

static inline float from_fp16(uint16_t bits) {
    _Float16 h;
    memcpy(&h, &bits, sizeof h);
    return (float)h;
}

/* dst = a + unpack(wire), in place (dst is a) or out of place (three buffers
 * apart), so the compiler may assume no overlap in each loop. */
#define WIRE_SUM(FROM)                                                              \
    do {                                                                            \
        const uint16_t *restrict w = wire;                                          \
        float *restrict d = dst;                                                    \
        if (dst == a) {                                                             \
            for (int64_t i = 0; i < n; i++) d[i] += FROM(w[i]);                     \
        } else {                                                                    \
            const float *restrict x = a;                                            \
            for (int64_t i = 0; i < n; i++) d[i] = x[i] + FROM(w[i]);               \
        }                                                                           \
    } while (0)

/* float16 kernels twice: with F16C (one instruction per conversion, x86 since 2012)
 * and portable (libgcc's software conversion, several times slower); both round to
 * nearest even, so they give the same bits, and the caller picks one at run time. */
#define FP16_KERNELS(SUFFIX, ATTR)                                                              \
    ATTR static void fp16_pack_##SUFFIX(uint16_t *restrict w, const float *restrict s,           \
                                        int64_t n) {                                            \
        for (int64_t i = 0; i < n; i++) w[i] = to_fp16(s[i]);                                    \
    }                                                                                           \
    ATTR static int fp16_round_##SUFFIX(float *restrict d, uint16_t *restrict w, int64_t n) {    \
        int special = 0;                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                       \
            w[i] = to_fp16(d[i]);                                                               \
            d[i] = from_fp16(w[i]);                                                             \
            special |= fp16_special(w[i]);                                                      \
        }                                                                                       \
        return special;                                                                         \
    }                                                                                           \
    ATTR static int fp16_unpack_##SUFFIX(float *restrict d, const uint16_t *restrict w,          \
                                         int64_t n) {                                           \
        int special = 0;                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                       \
            d[i] = from_fp16(w[i]);                                                             \
            special |= fp16_special(w[i]);                                                      \
        }                                                                                       \
        return special;                                                                         \
    }                                                                                           \
    ATTR static void fp16_sum_##SUFFIX(float *dst, const float *a, const uint16_t *wire,         \
                                       int64_t n) {                                             \
        WIRE_SUM(from_fp16);                                                                    \
    }

#if defined(__x86_64__) || defined(__i386__)
FP16_KERNELS(f16c, __attribute__((target("f16c"))))
FP16_KERNELS(soft, )
static int have_f16c(void) { return __builtin_cpu_supports("f16c"); }
#define FP16(name) (have_f16c() ? fp16_##name##_f16c : fp16_##name##_soft)
#else
FP16_KERNELS(soft, )
#define FP16(name) fp16_##name##_soft
#endif

int mlc_wire_size(int compression) { return compression == MLC_COMPRESSION_NONE ? 4 : 2; }

const char *mlc_compression_name(int compression) {
    switch (compression) {
    case MLC_COMPRESSION_NONE: return "none";
    case MLC_COMPRESSION_BF16: return "bf16";
    case MLC_COMPRESSION_FP16: return "fp16";
    default: return "unknown";
    }
}

MLC_VECTOR_CLONES static void bf16_pack(uint16_t *restrict w, const float *restrict s, int64_t n) {
    for (int64_t i = 0; i < n; i++) w[i] = to_bf16(s[i]);
}

MLC_VECTOR_CLONES static int bf16_round(float *restrict d, uint16_t *restrict w, int64_t n) {
    int special = 0;
    for (int64_t i = 0; i < n; i++) {
        w[i] = to_bf16(d[i]);
        d[i] = from_bf16(w[i]);
        special |= bf16_special(w[i]);
    }
    return special;
}

MLC_VECTOR_CLONES static int bf16_unpack(float *restrict d, const uint16_t *restrict w, int64_t n) {
    int special = 0;
    for (int64_t i = 0; i < n; i++) {
        d[i] = from_bf16(w[i]);
        special |= bf16_special(w[i]);
    }
    return special;
}

MLC_VECTOR_CLONES static void bf16_sum(float *dst, const float *a, const uint16_t *wire, int64_t n) {
    WIRE_SUM(from_bf16);
}

void mlc_wire_pack(void *wire, const float *src, int64_t n, int compression) {
    if (compression == MLC_COMPRESSION_BF16) bf16_pack(wire, src, n);
    else FP16(pack)(wire, src, n);
}

int mlc_wire_round(float *data, void *wire, int64_t n, int compression) {
    if (compression == MLC_COMPRESSION_BF16) return bf16_round(data, wire, n);
    return FP16(round)(data, wire, n);
}

int mlc_wire_unpack(float *dst, const void *wire, int64_t n, int compression) {
    if (compression == MLC_COMPRESSION_BF16) return bf16_unpack(dst, wire, n);
    return FP16(unpack)(dst, wire, n);
}

void mlc_wire_sum_to(float *dst, const float *a, const void *wire, int64_t n, int compression) {
    if (compression == MLC_COMPRESSION_BF16) bf16_sum(dst, a, wire, n);
    else FP16(sum)(dst, a, wire, n);
}

/* The last addition of an average and its division, block by block while the
 * block is in cache (as reduce.c's mlc_reduce_sum_average_to). */
#define MLC_WIRE_AVERAGE_BLOCK 4096

void mlc_wire_sum_average_to(float *dst, const float *a, const void *wire, int64_t n,
                             int compression, int nranks) {
    for (int64_t off = 0; off < n; off += MLC_WIRE_AVERAGE_BLOCK) {
        int64_t len = n - off < MLC_WIRE_AVERAGE_BLOCK ? n - off : MLC_WIRE_AVERAGE_BLOCK;
        mlc_wire_sum_to(dst + off, a + off, (const uint16_t *)wire + off, len, compression);
        mlc_divide_by_ranks(dst + off, len, MLC_FLOAT32, nranks);
    }
}
