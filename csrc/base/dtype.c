/* The dtype table, the one place that lists the element types: Python, the
 * TensorFlow ops and Keras read names, sizes and kinds through these getters.
 * bool travels (broadcast, allgather, alltoall) but is never reduced: a sum or an
 * average of truth values has no bool result, and Horovod refuses it too. */
#include "base.h"

static const struct {
    const char *name;
    int size;
    int is_float;
    int is_reducible;
} dtypes[MLC_NUM_DTYPES] = {
    [MLC_FLOAT32] = {"float32", 4, 1, 1}, [MLC_FLOAT64] = {"float64", 8, 1, 1},
    [MLC_FLOAT16] = {"float16", 2, 1, 1}, [MLC_BFLOAT16] = {"bfloat16", 2, 1, 1},
    [MLC_INT32] = {"int32", 4, 0, 1},     [MLC_INT64] = {"int64", 8, 0, 1},
    [MLC_UINT8] = {"uint8", 1, 0, 1},     [MLC_INT8] = {"int8", 1, 0, 1},
    [MLC_UINT16] = {"uint16", 2, 0, 1},   [MLC_INT16] = {"int16", 2, 0, 1},
    [MLC_BOOL] = {"bool", 1, 0, 0},
};

static int known(int dtype) { return dtype >= 0 && dtype < MLC_NUM_DTYPES; }

int mlc_dtype_size(int dtype) { return known(dtype) ? dtypes[dtype].size : 0; }
const char *mlc_dtype_name(int dtype) { return known(dtype) ? dtypes[dtype].name : "unknown"; }
int mlc_dtype_is_float(int dtype) { return known(dtype) && dtypes[dtype].is_float; }
int mlc_dtype_is_reducible(int dtype) { return known(dtype) && dtypes[dtype].is_reducible; }
