/* Tensor lists: copies between a range of their concatenation and a contiguous
 * buffer (packing into the fusion buffer and the direct allreduce's payload), and
 * the digest of a tensor's shape that ranks compare. */
#include <string.h>

#include "base.h"

uint64_t mlc_shape_digest(int ndim, const int64_t *dims) {
    /* The number of dimensions, then each: eight bytes a step (it is taken for every
     * tensor of every call), each word xored in and multiplied by FNV-1a's prime, the
     * high bits folded down at the end. */
    uint64_t h = (1469598103934665603ull ^ (uint64_t)ndim) * 1099511628211ull;
    for (int d = 0; d < ndim; d++) h = (h ^ (uint64_t)dims[d]) * 1099511628211ull;
    h ^= h >> 29;
    return h ? h : 1; /* 0 means "not said" */
}

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
