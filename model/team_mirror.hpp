// The team layer's scheduling, mirrored as SimGrid actors (the product's team
// layer runs on pthreads, which SimGrid 3.32 cannot take over). What is mirrored,
// from csrc/team: a request's plan (csrc/plan/plan.c, linked unchanged); its
// segments, each owned by lane mlc_segment_owner(g) and run in batches of
// MLC_RING_BATCH through the algorithm table (csrc/algos, linked unchanged); a
// keyed group's segments waiting until every tensor they overlap has arrived;
// staging copies for segments that span tensors; the agreement exchange before the
// data moves, done by the first lane that reaches the request; requests taken by
// every lane in queue order (so a pipelined step's group runs behind the previous
// one while the next backprop computes).
#ifndef MLC_MODEL_TEAM_MIRROR_HPP
#define MLC_MODEL_TEAM_MIRROR_HPP

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

extern "C" {
#include "plan/plan.h"
}

#include "node.hpp"

namespace mlcsim {

enum class Agree { off, alltoall, tree };

struct TeamConfig {
    int nranks = 2, nthreads = 1;
    int algorithm = MLC_ALG_AUTO, compression = MLC_COMPRESSION_NONE;
    int64_t chunk_bytes = 1 << 20, fusion_bytes = 64 << 20;
    int64_t latency_bytes = 512 << 10, inline_bytes = 4 << 20, direct_bytes = 4096;
    int64_t rabenseifner_bytes = 8 << 20;
    Agree agree = Agree::tree; // as the core (csrc/agree/exchange.c); alltoall: every signature to every rank
    int sample_batches = 0; // > 0: run this many batches per lane, then their mean time
};

struct Request {
    std::vector<int64_t> counts; // tensors, in arrival order
    std::vector<int64_t> starts; // the layout (ntensors + 1)
    int64_t span = 0;
    mlc_plan plan{};
    bool is_group = false, blocking = false;
    int64_t ready_elems = 0; // elements [0, ready) have arrived
    int arrived = 0, next_missing = 0;
    std::vector<char> got;       // per tensor: arrived
    bool agreed = false;
    int lanes_left = 0;
    int lanes_through = 0; // lanes through their segments (a group's seal waits for all)
    double t_start = -1, t_agreed = -1, t_done = -1;
};

struct RankStats {
    Counters data, agree;
    int64_t requests = 0;
    std::vector<std::pair<double, double>> batches; // each batch's reduction, start and end
};

class Team {
  public:
    Team(int rank, const TeamConfig &cfg, RankStats *stats);
    ~Team();
    // A request of these tensors (in layout order); blocking runs it on the caller
    // where the plan says so. Keyed groups then get arrive() per tensor, in order.
    std::shared_ptr<Request> submit(const std::vector<int64_t> &counts, bool is_group, bool blocking);
    void arrive(Request &req, int tensor);
    void wait(Request &req);
    void shutdown();

  private:
    void lane_main(int lane);
    void run_lane(Request &req, int lane, mlc_tp *tp, int64_t *sampled_n, double *sampled_s);
    void exchange(Request &req);
    void seal();
    int rank_;
    TeamConfig cfg_;
    RankStats *stats_;
    std::vector<mlc_tp> lane_tp_;
    mlc_tp caller_tp_, agree_tp_;
    std::deque<std::shared_ptr<Request>> queue_;
    std::vector<size_t> lane_next_;
    size_t popped_ = 0;
    bool closing_ = false;
    simgrid::s4u::MutexPtr mu_;
    simgrid::s4u::ConditionVariablePtr cv_;
    std::vector<simgrid::s4u::ActorPtr> lanes_;
};

}  // namespace mlcsim

#endif
