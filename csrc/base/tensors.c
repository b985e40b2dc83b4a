/* Copies between a range of a tensor list's concatenation and a contiguous
 * buffer: packing into the fusion buffer and the direct allreduce's payload. */
#include <string.h>

#include "base.h"

int mlc_tensor_at(const int64_t *starts, int ntensors, int64_t start) {
    int lo = 0, hi = ntensors - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (starts[mid] <= start) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static void copy_range(const mlc_tensor *tensors, const int64_t *starts, int ntensors, int dtype,
                       int64_t start, int64_t count, char *buf, int gather) {
    const int es = mlc_dtype_size(dtype);
    for (int t = mlc_tensor_at(starts, ntensors, start); t < ntensors && count > 0; t++) {
        int64_t within = start - starts[t];
        int64_t n = tensors[t].count - within;
        if (n <= 0) continue;
        if (n > count) n = count;
        if (gather) memcpy(buf, (const char *)mlc_tensor_input(&tensors[t]) + within * es, n * es);
        else memcpy((char *)tensors[t].data + within * es, buf, n * es);
        buf += n * es;
        start += n;
        count -= n;
    }
}

void mlc_gather_range(const mlc_tensor *tensors, const int64_t *starts, int ntensors, int dtype,
                      int64_t start, int64_t count, char *buf) {
    copy_range(tensors, starts, ntensors, dtype, start, count, buf, 1);
}

void mlc_scatter_range(const mlc_tensor *tensors, const int64_t *starts, int ntensors, int dtype,
                       int64_t start, int64_t count, const char *buf) {
    copy_range(tensors, starts, ntensors, dtype, start, count, (char *)buf, 0);
}
