/* The dtype table, the one place that lists the element types: Python, the
 * TensorFlow ops and Keras read names, sizes and kinds through these getters. */
#include "base.h"

static const struct {
    const char *name;
    int size;
    int is_float;
} dtypes[MLC_NUM_DTYPES] = {
    [MLC_FLOAT32] = {"float32", 4, 1}, [MLC_FLOAT64] = {"float64", 8, 1},
    [MLC_FLOAT16] = {"float16", 2, 1}, [MLC_BFLOAT16] = {"bfloat16", 2, 1},
    [MLC_INT32] = {"int32", 4, 0},     [MLC_INT64] = {"int64", 8, 0},
};

static int known(int dtype) { return dtype >= 0 && dtype < MLC_NUM_DTYPES; }

int mlc_dtype_size(int dtype) { return known(dtype) ? dtypes[dtype].size : 0; }
const char *mlc_dtype_name(int dtype) { return known(dtype) ? dtypes[dtype].name : "unknown"; }
int mlc_dtype_is_float(int dtype) { return known(dtype) && dtypes[dtype].is_float; }
