/* NaN/Inf scan for the finite check (agree/): a value is NaN or +-Inf
 * exactly when all its exponent bits are set, for every IEEE format and bfloat16.
 * The loops test bits, not values, so they vectorise without -ffast-math and run
 * at memory speed; a block at a time, so a NaN near the start ends the scan early.
 * Reads the buffer only; no messages. */
#include "base.h"

#define MLC_FINITE_BLOCK 4096

#define SCAN(T, MASK)                                                                   \
    do {                                                                                \
        const T *p = buf;                                                               \
        for (int64_t start = 0; start < n; start += MLC_FINITE_BLOCK) {                 \
            int64_t end = start + MLC_FINITE_BLOCK < n ? start + MLC_FINITE_BLOCK : n;  \
            T bad = 0;                                                                  \
            for (int64_t i = start; i < end; i++) bad |= (T)((p[i] & (MASK)) == (MASK)); \
            if (bad) return 1;                                                          \
        }                                                                               \
        return 0;                                                                       \
    } while (0)

int mlc_has_nonfinite(const void *buf, int64_t n, int dtype) {
    switch (dtype) {
    case MLC_FLOAT32: SCAN(uint32_t, 0x7f800000u);
    case MLC_FLOAT64: SCAN(uint64_t, 0x7ff0000000000000ull);
    case MLC_FLOAT16: SCAN(uint16_t, 0x7c00u);
    case MLC_BFLOAT16: SCAN(uint16_t, 0x7f80u);
    default: return 0; /* integers are always finite */
    }
}
