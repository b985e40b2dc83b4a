// Where an op's result lives (result_memory.cc).
#pragma once
#include "common.h"

namespace ml_comm_tf {
// Output output_index shaped as input input_index: the input's own buffer when
// nobody else holds it (reduced in place), else memory reused across calls.
tensorflow::Status ForwardOrAllocateResult(OpKernelContext *ctx, int input_index, int output_index,
                                           Tensor **out);
}  // namespace ml_comm_tf
