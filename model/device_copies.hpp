// Host<->device copies of a GPU node's gradients, for a team that reduces on the host
// (the Cray plugin's CUDA path): each gradient is copied to the host when backprop has
// produced it, before the team may send it, and each reduced batch back to the device,
// overlapped with the rest of the reduction (the plugin's CUDA streams). One copy
// engine per direction: copies of a direction queue behind each other at the PCIe rate.
#ifndef MLC_MODEL_DEVICE_COPIES_HPP
#define MLC_MODEL_DEVICE_COPIES_HPP

#include <simgrid/s4u.hpp>

#include <deque>
#include <memory>
#include <utility>

#include "team_mirror.hpp"

namespace mlcsim {

class DeviceCopies {
  public:
    // bytes_per_s: the PCIe rate of one direction; 0 turns copies off (arrive() is then
    // the team's own, and copy_back() returns at once).
    DeviceCopies(Team &team, double bytes_per_s);
    // Tensor `tensor` of `req` (elements) is ready on the device: the team gets it once
    // its copy to the host is done.
    void arrive(const std::shared_ptr<Request> &req, int tensor, int64_t elements);
    // After the team finished `req`: wait until its batches (this rank's, from `stats`
    // since the last call) have been copied back, each starting when it was reduced.
    void copy_back(const Request &req, const RankStats &stats);
    void shutdown();

  private:
    void copier_main();
    Team &team_;
    double bytes_per_s_;
    simgrid::s4u::MutexPtr mu_;
    simgrid::s4u::ConditionVariablePtr cv_;
    std::deque<std::pair<std::shared_ptr<Request>, std::pair<int, int64_t>>> queue_;
    bool closing_ = false;
    simgrid::s4u::ActorPtr copier_;
    size_t batches_seen_ = 0;
};

}  // namespace mlcsim

#endif
