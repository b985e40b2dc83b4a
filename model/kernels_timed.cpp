// base/reduce.c's and base/wire.c's functions for sizes-only runs: each costs its
// calibrated time on the calling actor's simulated core and touches no memory.
// The algorithms (csrc/algos) call these by name, so linking this file instead of
// the product's kernels is what makes them run unchanged on sizes alone.
#include <simgrid/s4u.hpp>

#include "node.hpp"

extern "C" {
#include "base/base.h"
}

namespace sg4 = simgrid::s4u;

namespace mlcsim {

NodeParams node;

void charge_core(double seconds) {
    if (seconds <= 0) return;
    sg4::Host *h = sg4::this_actor::get_host();
    sg4::this_actor::exec_init(seconds * h->get_speed())->set_priority(node.comm_weight)->wait();
}

sg4::ExecPtr start_core(double seconds) {
    if (seconds <= 0) return nullptr;
    sg4::Host *h = sg4::this_actor::get_host();
    return sg4::this_actor::exec_init(seconds * h->get_speed())->set_priority(node.comm_weight)->start();
}

}  // namespace mlcsim

using mlcsim::charge_core;
using mlcsim::node;

namespace {
double bytes_of(int64_t n, int dtype) { return (double)n * mlc_dtype_size(dtype); }
}  // namespace

extern "C" {

void mlc_reduce_sum_into(void *, const void *, int64_t n, int dtype) {
    charge_core(bytes_of(n, dtype) / node.reduce_bytes_per_s);
}

void mlc_reduce_sum_to(void *, const void *, const void *, int64_t n, int dtype) {
    charge_core(bytes_of(n, dtype) / node.reduce_bytes_per_s);
}

void mlc_reduce_sum_average_to(void *, const void *, const void *, int64_t n, int dtype, int) {
    charge_core(bytes_of(n, dtype) / node.reduce_bytes_per_s);
}

void mlc_reduce_op_to(void *, const void *, const void *, int64_t n, int dtype, int) {
    charge_core(bytes_of(n, dtype) / node.reduce_bytes_per_s);  // min, max, product: as a sum
}

void mlc_divide_by_ranks(void *, int64_t n, int dtype, int) {
    charge_core(bytes_of(n, dtype) / node.reduce_bytes_per_s);
}

int mlc_wire_size(int compression) { return compression == MLC_COMPRESSION_NONE ? 4 : 2; }

void mlc_wire_pack(void *, const float *, int64_t n, int) { charge_core(4.0 * n / node.convert_bytes_per_s); }

int mlc_wire_round(float *, void *, int64_t n, int) {
    charge_core(2 * 4.0 * n / node.convert_bytes_per_s);
    return 0;
}

int mlc_wire_unpack(float *, const void *, int64_t n, int) {
    charge_core(4.0 * n / node.convert_bytes_per_s);
    return 0;
}

void mlc_wire_sum_to(float *, const float *, const void *, int64_t n, int) {
    charge_core(4.0 * n / node.reduce_bytes_per_s + 4.0 * n / node.convert_bytes_per_s);
}

void mlc_wire_sum_average_to(float *, const float *, const void *, int64_t n, int, int) {
    charge_core(4.0 * n / node.reduce_bytes_per_s + 4.0 * n / node.convert_bytes_per_s);
}
}
