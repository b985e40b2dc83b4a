// See team_mirror.hpp: csrc/team's scheduling as SimGrid actors; the plan, the
// schedules and the algorithms are the product's own code.
#include "team_mirror.hpp"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "transport_simgrid.hpp"

extern "C" {
#include "algos/algo.h"
}

namespace sg4 = simgrid::s4u;

namespace mlcsim {

namespace {

// Addresses for the algorithms' buffers: reserved, never mapped readable, so a
// sizes-only run that touched a payload would fault instead of computing silently.
char *arena(int which) {
    static char *regions[2] = {nullptr, nullptr};
    if (!regions[which]) {
        void *p = mmap(nullptr, (size_t)1 << 36, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            std::perror("mmap of the address arena");
            std::exit(2);
        }
        regions[which] = static_cast<char *>(p);
    }
    return regions[which];
}

constexpr int COMM_CALLER = 0, COMM_AGREE = 1, COMM_LANE0 = 2;
constexpr int SEAL_TAG = MLC_TAG_SPACE - 1; // csrc/team/seal.c's

}  // namespace

Team::Team(int rank, const TeamConfig &cfg, RankStats *stats)
    : rank_(rank), cfg_(cfg), stats_(stats), lane_tp_(cfg.nthreads), lane_next_(cfg.nthreads, 0) {
    mu_ = sg4::Mutex::create();
    cv_ = sg4::ConditionVariable::create();
    transport_open(&caller_tp_, rank, cfg.nranks, COMM_CALLER, &stats->data);
    transport_open(&agree_tp_, rank, cfg.nranks, COMM_AGREE, &stats->agree);
    for (int l = 0; l < cfg.nthreads; l++) {
        transport_open(&lane_tp_[l], rank, cfg.nranks, COMM_LANE0 + l, &stats->data);
        lanes_.push_back(sg4::Actor::create("lane" + std::to_string(rank) + "." + std::to_string(l),
                                            sg4::this_actor::get_host(), [this, l] { lane_main(l); }));
    }
}

Team::~Team() {
    transport_close(&caller_tp_);
    transport_close(&agree_tp_);
    for (auto &tp : lane_tp_) transport_close(&tp);
}

void Team::shutdown() {
    mu_->lock();
    closing_ = true;
    cv_->notify_all();
    mu_->unlock();
    for (auto &a : lanes_) a->join();
}

std::shared_ptr<Request> Team::submit(const std::vector<int64_t> &counts, bool is_group, bool blocking) {
    auto req = std::make_shared<Request>();
    req->counts = counts;
    req->is_group = is_group;
    req->blocking = blocking;
    req->t_start = sg4::Engine::get_clock();
    int64_t total = 0;
    for (auto c : counts) total += c;
    mlc_plan_input in{};
    in.kind = MLC_KIND_ALLREDUCE;
    in.dtype = MLC_FLOAT32;
    in.ntensors = (int)counts.size();
    in.total = total;
    in.is_group = is_group;
    in.blocking = blocking;
    in.nranks = cfg_.nranks;
    in.checked = cfg_.agree != Agree::off;
    in.algorithm = cfg_.algorithm;
    in.nthreads = cfg_.nthreads;
    in.chunk_bytes = cfg_.chunk_bytes / 8 * 8;
    int64_t window = (cfg_.fusion_bytes + in.chunk_bytes - 1) / in.chunk_bytes;
    in.window_segments = window < (int64_t)cfg_.nthreads * MLC_RING_BATCH ? cfg_.nthreads * MLC_RING_BATCH : window;
    in.latency_bytes = cfg_.latency_bytes;
    in.inline_bytes = cfg_.inline_bytes;
    in.direct_bytes = cfg_.direct_bytes;
    in.compression = cfg_.compression;
    in.rabenseifner_bytes = cfg_.rabenseifner_bytes;
    mlc_plan_make(&in, &req->plan);
    // The layout: with plan.aligned each tensor of a segment or more starts a segment.
    std::vector<mlc_tensor> tensors(counts.size());
    for (size_t i = 0; i < counts.size(); i++) tensors[i] = mlc_tensor{nullptr, nullptr, counts[i], 0, 0};
    req->starts.assign(counts.size() + 1, 0);
    if (req->plan.aligned) {
        req->span = mlc_segment_aligned_starts(tensors.data(), (int)counts.size(), req->plan.seg_elems,
                                               req->starts.data());
        req->plan.nseg = mlc_segment_count(req->span, req->plan.seg_elems);
    } else {
        for (size_t i = 0; i < counts.size(); i++) req->starts[i + 1] = req->starts[i] + counts[i];
        req->span = total;
    }
    req->got.assign(counts.size(), 0);
    if (!is_group) {
        req->arrived = req->next_missing = (int)counts.size();
        req->ready_elems = req->span;
    }
    stats_->requests++;
    if (req->plan.on_caller || req->plan.direct || req->plan.nothing) {
        req->lanes_left = 1;
        int64_t n = 0;
        double s = 0;
        run_lane(*req, 0, &caller_tp_, &n, &s);
        req->t_done = sg4::Engine::get_clock();
        req->lanes_left = 0;
        return req;
    }
    mu_->lock();
    req->lanes_left = req->plan.lanes;
    queue_.push_back(req);
    cv_->notify_all();
    mu_->unlock();
    return req;
}

void Team::arrive(Request &req, int tensor) {
    mu_->lock();
    // As csrc/team/group.c: elements are ready up to the first tensor still missing.
    req.arrived++;
    req.got[tensor] = 1;
    while (req.next_missing < (int)req.counts.size() && req.got[req.next_missing]) req.next_missing++;
    req.ready_elems = req.next_missing == (int)req.counts.size() ? req.span : req.starts[req.next_missing];
    cv_->notify_all();
    mu_->unlock();
}

void Team::wait(Request &req) {
    mu_->lock();
    while (req.lanes_left > 0) cv_->wait(mu_);
    mu_->unlock();
}

void Team::lane_main(int lane) {
    int64_t sampled_n = 0;
    double sampled_s = 0;
    for (;;) {
        mu_->lock();
        while (lane_next_[lane] >= queue_.size() && !closing_) cv_->wait(mu_);
        if (lane_next_[lane] >= queue_.size()) {
            mu_->unlock();
            return;
        }
        std::shared_ptr<Request> req = queue_[lane_next_[lane]++];
        mu_->unlock();
        run_lane(*req, lane, &lane_tp_[lane], &sampled_n, &sampled_s);
        mu_->lock();
        req->lanes_through++;
        cv_->notify_all();
        if (lane == 0 && req->is_group && cfg_.nranks > 1) {
            while (req->lanes_through < cfg_.nthreads) cv_->wait(mu_);
            mu_->unlock();
            seal();
            mu_->lock();
        }
        if (--req->lanes_left == 0) req->t_done = sg4::Engine::get_clock();
        cv_->notify_all();
        mu_->unlock();
    }
}

// The agreement: every rank's 96-byte signature to every rank (csrc/agree/exchange.c),
// or a recursive-doubling exchange of a digest (2 log2(n) messages per rank).
// A direct allreduce's input rides in the signature, and is summed here.
void Team::exchange(Request &req) {
    const int n = cfg_.nranks;
    if (n == 1 || cfg_.agree == Agree::off) return;
    // What the core sends: the tree's record, or every rank's signature (the old all-to-all).
    const int64_t header = cfg_.agree == Agree::tree ? MLC_AGREE_RECORD_BYTES : MLC_SIGNATURE_BYTES;
    const int64_t payload = header + (req.plan.direct ? req.span * 4 : 0);
    if (cfg_.agree == Agree::alltoall) {
        std::vector<sg4::CommPtr> comms;
        std::vector<void *> got(n);
        auto *mine = sg4::Mailbox::by_name("agree>" + std::to_string(rank_));
        for (int k = 1; k < n; k++) comms.push_back(mine->get_async<void>(&got[k]));
        static char token;
        for (int k = 1; k < n; k++) {
            charge_core(node.send_overhead_s);
            auto *to = sg4::Mailbox::by_name("agree>" + std::to_string((rank_ + k) % n));
            comms.push_back(to->put_async(&token, (uint64_t)payload));
            stats_->agree.messages++;
            stats_->agree.bytes += payload;
        }
        for (auto &c : comms) c->wait();
        charge_core((n - 1) * node.recv_overhead_s);
    } else {
        const int p2 = mlc_rd_pow2_floor(n), fold = mlc_rd_fold_partner(rank_, n);
        char *buf = arena(1);
        if (rank_ >= p2) {
            mlc_tp_send(&agree_tp_, buf, payload, fold, 0);
            mlc_tp_recv(&agree_tp_, buf, payload, fold, 0);
        } else {
            if (fold >= 0) mlc_tp_recv(&agree_tp_, buf, payload, fold, 0);
            for (int s = 0; s < mlc_rd_nsteps(n); s++)
                mlc_tp_sendrecv(&agree_tp_, buf, payload, mlc_rd_partner(rank_, n, s), buf, payload,
                                mlc_rd_partner(rank_, n, s), 0);
            if (fold >= 0) mlc_tp_send(&agree_tp_, buf, payload, fold, 0);
        }
    }
    if (req.plan.direct) mlc_reduce_sum_into(nullptr, nullptr, (n - 1) * req.span, MLC_FLOAT32);
}

// A keyed group's seal (csrc/team/seal.c): once every lane of this rank is through the
// group's data, lane 0 runs a recursive-doubling minimum of two int64 (the ranks that
// cancelled the group) before the group's tensors are handed back.
void Team::seal() {
    mlc_segment seg = {arena(0), nullptr, 2, SEAL_TAG};
    const mlc_algo_call call = {MLC_INT64, (int)sizeof(int64_t), MLC_OP_MIN, &seg, 1, arena(1), 64,
                                MLC_COMPRESSION_NONE};
    if (int rc = mlc_allreduce_recursive_doubling(&lane_tp_[0], &call)) {
        std::fprintf(stderr, "rank %d: the seal failed with status %d\n", rank_, rc);
        std::exit(3);
    }
}

// csrc/team/execute.c's run_lane and allreduce_segments, on sizes.
void Team::run_lane(Request &req, int lane, mlc_tp *tp, int64_t *sampled_n, double *sampled_s) {
    mu_->lock();
    if (!req.agreed && req.t_agreed < 0) {
        req.t_agreed = 0; // this lane exchanges; the others wait for its verdict
        mu_->unlock();
        exchange(req);
        mu_->lock();
        req.agreed = true;
        req.t_agreed = sg4::Engine::get_clock();
        cv_->notify_all();
    }
    while (!req.agreed) cv_->wait(mu_);
    mu_->unlock();
    const mlc_plan *p = &req.plan;
    if (p->direct || p->nothing) return;
    const int es = 4;
    const mlc_algo *algo = mlc_algo_find(p->algorithm);
    const int64_t scratch_bytes = lane < 0 || p->on_caller
                                      ? std::max<int64_t>(cfg_.latency_bytes, MLC_RING_BATCH * cfg_.chunk_bytes + 64)
                                      : MLC_RING_BATCH * cfg_.chunk_bytes + 64;
    mlc_segment batch[MLC_RING_BATCH];
    int64_t staged_bytes = 0;
    int nb = 0;
    // A request's first batch on a lane runs for real and is never sampled: it absorbs
    // the ranks' arrival skew (with jitter, or with no agreement before it), which is
    // paid once per request, not per batch.
    bool first_batch = true;
    const int ntensors = (int)req.counts.size();
    for (int64_t g = 0; g < p->nseg; g++) {
        if (mlc_segment_owner(g, p->window, p->lanes) != lane) continue;
        int64_t start = g * p->seg_elems;
        int64_t count = req.span - start < p->seg_elems ? req.span - start : p->seg_elems;
        const int t_last = mlc_tensor_at(req.starts.data(), ntensors, start + count - 1);
        const int64_t content_end = req.starts[t_last] + req.counts[t_last];
        if (content_end < start + count) count = content_end - start;
        mu_->lock();
        while (req.ready_elems < start + count) cv_->wait(mu_);
        mu_->unlock();
        const int t = mlc_tensor_at(req.starts.data(), ntensors, start);
        if (start + count > req.starts[t] + req.counts[t]) { // spans tensors: packed into a slot
            charge_core((double)count * es / node.copy_bytes_per_s);
            staged_bytes += count * es;
        }
        batch[nb] = mlc_segment{arena(0) + start * es, nullptr, count, (int)(g % MLC_TAG_SPACE)};
        nb++;
        const bool last = g + (int64_t)p->lanes >= p->nseg;
        if (nb < MLC_RING_BATCH && !last) continue;
        const double t0 = sg4::Engine::get_clock();
        const bool steady = !last && !first_batch && nb == MLC_RING_BATCH;
        first_batch = false;
        if (cfg_.sample_batches > 0 && *sampled_n >= cfg_.sample_batches && steady) {
            sg4::this_actor::sleep_for(*sampled_s / *sampled_n); // a steady batch: its sampled mean
        } else {
            const mlc_algo_call call = {MLC_FLOAT32, es, MLC_OP_AVERAGE, batch, nb, arena(1), scratch_bytes,
                                        p->compression};
            int rc = algo ? algo->allreduce(tp, &call) : MLC_ERR_ARG;
            if (rc) {
                std::fprintf(stderr, "rank %d: algorithm %d failed with status %d\n", rank_, p->algorithm, rc);
                std::exit(3);
            }
            if (steady) {
                (*sampled_n)++;
                *sampled_s += sg4::Engine::get_clock() - t0;
            }
        }
        if (staged_bytes) charge_core((double)staged_bytes / node.copy_bytes_per_s);
        stats_->batches.emplace_back(t0, sg4::Engine::get_clock());
        staged_bytes = 0;
        nb = 0;
    }
}

}  // namespace mlcsim
