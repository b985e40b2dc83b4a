// The simulated node: what a rank's host costs in time besides the network, read
// from the calibration (docs/scale.md, "Platforms and calibration"). Every cost is charged on the
// simulated host of the actor that pays it, so reductions, 16-bit conversions,
// per-message overheads and backprop compete for the same simulated cores.
#ifndef MLC_MODEL_NODE_HPP
#define MLC_MODEL_NODE_HPP

#include <cstdint>

#include <simgrid/s4u/Exec.hpp>

namespace mlcsim {

struct NodeParams {
    double reduce_bytes_per_s = 4e9;   // a float32 sum a + b -> out, bytes of out per second
    double convert_bytes_per_s = 4e9;  // float32 <-> 16-bit, float32 bytes per second
    double copy_bytes_per_s = 8e9;     // staging copies (fusion slots)
    double send_overhead_s = 1e-6;     // CPU per message posted (MPI + transport)
    double recv_overhead_s = 1e-6;     // CPU per message received
    double cpu_per_byte_s = 0;         // CPU per byte sent and per byte received (a kernel's TCP)
    double comm_weight = 1.0;          // share weight of communication work against compute
    bool compute_on_core = false;      // backprop runs on the same simulated core (test bed)
};

// The parameters of the whole run (one node type).
extern NodeParams node;

// Charge `seconds` of one core's time to the calling actor's host, at the
// communication threads' weight.
void charge_core(double seconds);
// The same, started and left running: the caller waits for it later (nullptr: nothing).
simgrid::s4u::ExecPtr start_core(double seconds);

// Messages posted through the simulated transport, per rank, by communicator class.
struct Counters {
    int64_t messages = 0;
    int64_t bytes = 0;
};

}  // namespace mlcsim

#endif
