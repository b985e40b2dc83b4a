// See device_copies.hpp.
#include "device_copies.hpp"

#include <algorithm>
#include <vector>

namespace sg4 = simgrid::s4u;

namespace mlcsim {

DeviceCopies::DeviceCopies(Team &team, double bytes_per_s) : team_(team), bytes_per_s_(bytes_per_s) {
    if (bytes_per_s_ <= 0) return;
    mu_ = sg4::Mutex::create();
    cv_ = sg4::ConditionVariable::create();
    copier_ = sg4::Actor::create("d2h", sg4::this_actor::get_host(), [this] { copier_main(); });
}

void DeviceCopies::arrive(const std::shared_ptr<Request> &req, int tensor, int64_t elements) {
    if (bytes_per_s_ <= 0) {
        team_.arrive(*req, tensor);
        return;
    }
    mu_->lock();
    queue_.push_back({req, {tensor, elements}});
    cv_->notify_all();
    mu_->unlock();
}

// The device-to-host engine: one tensor after the other, in the order backprop made them.
void DeviceCopies::copier_main() {
    for (;;) {
        mu_->lock();
        while (queue_.empty() && !closing_) cv_->wait(mu_);
        if (queue_.empty()) {
            mu_->unlock();
            return;
        }
        auto item = queue_.front();
        queue_.pop_front();
        mu_->unlock();
        sg4::this_actor::sleep_for(4.0 * (double)item.second.second / bytes_per_s_);
        team_.arrive(*item.first, item.second.first);
    }
}

void DeviceCopies::copy_back(const Request &req, const RankStats &stats) {
    if (bytes_per_s_ <= 0) return;
    // This request's batches: those recorded (in the order they ended) up to its end; a
    // pipelined step's next request may have started batches since.
    std::vector<double> ends;
    for (; batches_seen_ < stats.batches.size() && stats.batches[batches_seen_].second <= req.t_done; batches_seen_++)
        ends.push_back(stats.batches[batches_seen_].second);
    if (ends.empty()) return;
    int64_t elements = 0;
    for (auto c : req.counts) elements += c;
    // The request's bytes over its batches (a batch is a few equal segments; the last
    // may be short, which this spreads over the others).
    const double per_batch = 4.0 * (double)elements / (double)ends.size() / bytes_per_s_;
    double engine_free = 0;
    for (double e : ends) engine_free = std::max(engine_free, e) + per_batch;
    const double now = sg4::Engine::get_clock();
    if (engine_free > now) sg4::this_actor::sleep_for(engine_free - now);
}

void DeviceCopies::shutdown() {
    if (bytes_per_s_ <= 0) return;
    mu_->lock();
    closing_ = true;
    cv_->notify_all();
    mu_->unlock();
    copier_->join();
}

}  // namespace mlcsim
