// The SimGrid transport (transport_simgrid.cpp): an endpoint per simulated
// communicator, as the product has an MPI communicator per team thread.
#ifndef MLC_MODEL_TRANSPORT_SIMGRID_HPP
#define MLC_MODEL_TRANSPORT_SIMGRID_HPP

extern "C" {
#include "transport/transport.h"
}

#include "node.hpp"

namespace mlcsim {

// comm_id names the communicator: messages of different ids never match.
void transport_open(mlc_tp *tp, int rank, int size, int comm_id, Counters *counters);
void transport_close(mlc_tp *tp);

}  // namespace mlcsim

#endif
