/* The product's own kernels timed on this machine, for the model's calibration
 * (tools/project.py --calibrate): csrc/base/reduce.c's float32 sum a + b -> out and
 * csrc/base/wire.c's float32 -> bfloat16 rounding (mlc_wire_pack), built with the
 * product's flags and instruction-set clones. Prints bytes of float32 per second, the
 * best of 50 runs over 16 MiB (out of cache, as a segment mostly is; short runs, so that one
 * runs undisturbed on a machine shared with other work). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define COUNT (4 * 1024 * 1024)

static double best(void (*fn)(float *, float *, void *), float *a, float *b, void *w) {
    double top = 1e30;
    for (int i = 0; i < 50; i++) {
        double t0 = mlc_now();
        fn(a, b, w);
        double t = mlc_now() - t0;
        if (t < top) top = t;
    }
    return (double)COUNT * 4 / top;
}

static void sum(float *a, float *b, void *w) { mlc_reduce_sum_to(w, a, b, COUNT, MLC_FLOAT32); }
static void pack(float *a, float *b, void *w) {
    (void)b;
    mlc_wire_pack(w, a, COUNT, MLC_COMPRESSION_BF16);
}
static void copy(float *a, float *b, void *w) {
    (void)w;
    memcpy(b, a, (size_t)COUNT * 4);
}

int main(void) {
    float *a = malloc((size_t)COUNT * 4), *b = malloc((size_t)COUNT * 4), *out = malloc((size_t)COUNT * 4);
    if (!a || !b || !out) return 1;
    for (int i = 0; i < COUNT; i++) a[i] = b[i] = out[i] = (float)(i % 1000);
    printf("{\"reduce_bytes_per_s\": %.6g, \"convert_bytes_per_s\": %.6g, \"copy_bytes_per_s\": %.6g}\n",
           best(sum, a, b, out), best(pack, a, b, out), best(copy, a, b, out));
    return 0;
}
