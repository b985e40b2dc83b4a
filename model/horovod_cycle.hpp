// Horovod's scheme for one allreduce of fused gradients at a time (docs/tensor-fusion.rst
// and horovod/common/operations.cc of 2017-2018): a background loop wakes every cycle
// time, asks every rank which gradients it has (rank 0 coordinates), and allreduces
// those that all ranks have, in the order they became ready, fused into buffers of at
// most the fusion threshold (a larger tensor goes alone); a step's optimizer waits for
// all of them. The allreduce of B fused bytes costs what a table of (bytes, seconds)
// says, between its rows on a line (below the first, the first's time; beyond the last,
// on the last two rows' line): the
// model's own ring allreduce (the core's ring file, every rank in one ring, as NCCL 2
// ran it) on the same platform; the negotiation costs a fixed time per cycle.
#ifndef MLC_MODEL_HOROVOD_CYCLE_HPP
#define MLC_MODEL_HOROVOD_CYCLE_HPP

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <utility>
#include <vector>

namespace mlcsim {

struct HorovodParams {
    double fusion_bytes = 64.0 * (1 << 20);
    double cycle_s = 5e-3;
    double negotiation_s = 0;
    std::vector<std::pair<double, double>> allreduce_s; // (bytes, seconds), bytes rising
    double allreduce(double bytes) const;
};

class HorovodCycle {
  public:
    // tensor_bytes: each gradient's bytes, by the index ranks pass to ready().
    HorovodCycle(int nranks, std::vector<int64_t> tensor_bytes, const HorovodParams &p);
    // This rank has gradient `tensor` of the current step.
    void ready(int tensor);
    // Block until every gradient of the current step is allreduced.
    void wait_step();
    // The background loop (one actor for the job), for `steps` steps.
    void coordinator_main(int steps);
    int64_t allreduces() const { return allreduces_; }

  private:
    int nranks_;
    std::vector<int64_t> bytes_;
    HorovodParams p_;
    std::vector<int> have_;         // ranks that have each tensor, this step
    std::vector<int> order_;        // tensors every rank has, in the order that happened
    size_t taken_ = 0, done_ = 0;   // of order_: negotiated, allreduced
    int step_ = 0;
    int64_t allreduces_ = 0;
    simgrid::s4u::MutexPtr mu_;
    simgrid::s4u::ConditionVariablePtr cv_;
};

}  // namespace mlcsim

#endif
