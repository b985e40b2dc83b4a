/* Base layer: what every other layer may use and that uses nothing of theirs.
 * Status and version text, the dtype table, the clock, message text, copies
 * between tensor lists and contiguous buffers, the reduction kernels and the
 * NaN/Inf scan. No MPI, no threads, no teams. */
#ifndef MLC_BASE_H
#define MLC_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ml_comm.h"
#include "ml_comm_internal.h"

#define MLC_VERSION "0.1.0"
/* Room for a message that lists what each group of ranks submitted. */
#define MLC_MSG_LEN 512

/* A loop built for several instruction sets (plain x86-64, AVX2, AVX-512), the widest
 * the CPU has picked by the loader (reduce.c, wire.c say why). Not under
 * ThreadSanitizer: the loader runs the clones' resolvers before the TSan runtime is
 * set up, and the instrumented resolver crashes the process. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(MLC_NO_CLONES) && !defined(__SANITIZE_THREAD__)
#define MLC_VECTOR_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define MLC_VECTOR_CLONES
#endif

/* a modulo n in 0..n-1, for a negative a too (rank r - k around a ring). */
static inline int mlc_mod(int a, int n) { return ((a % n) + n) % n; }

/* Sizes that come from callers are multiplied and added checked: 1 when the exact result
 * does not fit an int64 (then *out is not to be used). */
static inline int mlc_mul_overflows(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline int mlc_add_overflows(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }

/* clock.c: seconds on CLOCK_MONOTONIC. */
double mlc_now(void);

/* thread_slice.c: ask the scheduler for a time slice of ns for the calling thread (0: the
 * kernel's default). MLC_ERR_STATE where it cannot be asked (not Linux, a real-time
 * policy); a kernel before 6.12 accepts and ignores it. */
int mlc_thread_request_slice(int64_t ns);

/* text.c: append to buf (holding *off bytes) what fits; a cut text ends "...". */
void mlc_append(char *buf, size_t len, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* tensors.c: elements [start, start+count) of the concatenation of a tensor list,
 * copied from the tensors' inputs into buf (gather) or from buf into their data
 * (scatter). starts[i] is tensor i's first element in the concatenation. */
void mlc_gather_range(const mlc_tensor *tensors, const int64_t *starts, int ntensors, int dtype,
                      int64_t start, int64_t count, char *buf);
void mlc_scatter_range(const mlc_tensor *tensors, const int64_t *starts, int ntensors, int dtype,
                       int64_t start, int64_t count, const char *buf);
/* The tensor that holds element `start` of the concatenation (the last one that
 * starts at or before it; for start < total a non-empty one). */
int mlc_tensor_at(const int64_t *starts, int ntensors, int64_t start);
/* The bytes a tensor's reduction reads: its source, or its data when in place. */
static inline const void *mlc_tensor_input(const mlc_tensor *t) { return t->source ? t->source : t->data; }

/* bfloat16 <-> float32: the top half of a float32; rounding to nearest, ties to even,
 * NaN kept quiet. */
static inline float mlc_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline uint16_t mlc_f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* quiet NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(bits >> 16);
}

/* reduce.c: dst += src element-wise; dst = a + b (out of place; dst may be a);
 * an average's final division. */
void mlc_reduce_sum_into(void *dst, const void *src, int64_t n, int dtype);
void mlc_reduce_sum_to(void *dst, const void *a, const void *b, int64_t n, int dtype);
/* dst = (a + b) / nranks, bit for bit as mlc_reduce_sum_to then mlc_divide_by_ranks. */
void mlc_reduce_sum_average_to(void *dst, const void *a, const void *b, int64_t n, int dtype,
                               int nranks);
void mlc_divide_by_ranks(void *buf, int64_t n, int dtype, int nranks);

/* reduce_ops.c: dst = a op b element-wise for every MLC_OP_* (sum and average add;
 * an average's division is left to its caller); dst may be a. */
void mlc_reduce_op_to(void *dst, const void *a, const void *b, int64_t n, int dtype, int op);

/* wire.c: float32 <-> the 16-bit values that travel under MLC_COMPRESSION_BF16/FP16
 * (round to nearest even). wire_size: bytes per value on the wire (4: NONE). The
 * functions that return int return 1 when some 16-bit value they wrote or read is
 * NaN or +-Inf (how the ring sees a float16 overflow), else 0. */
int mlc_wire_size(int compression);
void mlc_wire_pack(void *wire, const float *src, int64_t n, int compression);
/* wire = pack(data), then data = unpack(wire): the rounded value the rank sends and keeps. */
int mlc_wire_round(float *data, void *wire, int64_t n, int compression);
int mlc_wire_unpack(float *dst, const void *wire, int64_t n, int compression);
/* dst = a + unpack(wire), in float32; dst may be a. */
void mlc_wire_sum_to(float *dst, const float *a, const void *wire, int64_t n, int compression);
/* dst = (a + unpack(wire)) / nranks, bit for bit as mlc_wire_sum_to then mlc_divide_by_ranks. */
void mlc_wire_sum_average_to(float *dst, const float *a, const void *wire, int64_t n,
                             int compression, int nranks);

/* finite.c: 1 when some of the n elements is NaN or +-Inf (floating dtypes only). */
int mlc_has_nonfinite(const void *buf, int64_t n, int dtype);

#endif
