// See horovod_cycle.hpp.
#include "horovod_cycle.hpp"

#include <algorithm>
#include <utility>

namespace sg4 = simgrid::s4u;

namespace mlcsim {

double HorovodParams::allreduce(double bytes) const {
    const auto &t = allreduce_s;
    if (t.empty()) return 0;
    if (t.size() == 1 || bytes <= t[0].first) return t[0].second;
    size_t i = 1;
    while (i + 1 < t.size() && t[i].first < bytes) i++;
    const double slope = (t[i].second - t[i - 1].second) / (t[i].first - t[i - 1].first);
    return std::max(0.0, t[i - 1].second + slope * (bytes - t[i - 1].first));
}

HorovodCycle::HorovodCycle(int nranks, std::vector<int64_t> tensor_bytes, const HorovodParams &p)
    : nranks_(nranks), bytes_(std::move(tensor_bytes)), p_(p), have_(bytes_.size(), 0) {
    mu_ = sg4::Mutex::create();
    cv_ = sg4::ConditionVariable::create();
}

void HorovodCycle::ready(int tensor) {
    mu_->lock();
    if (++have_[tensor] == nranks_) order_.push_back(tensor);
    mu_->unlock();
}

void HorovodCycle::wait_step() {
    mu_->lock();
    const int mine = step_;
    while (step_ == mine) cv_->wait(mu_);
    mu_->unlock();
}

void HorovodCycle::coordinator_main(int steps) {
    const size_t ntensors = bytes_.size();
    double cycle_start = -p_.cycle_s;
    while (step_ < steps) {
        // RunLoopOnce: sleep what is left of the cycle, then negotiate and allreduce.
        const double wake = cycle_start + p_.cycle_s;
        if (sg4::Engine::get_clock() < wake) sg4::this_actor::sleep_until(wake);
        cycle_start = sg4::Engine::get_clock();
        mu_->lock();
        std::vector<int> take(order_.begin() + (long)taken_, order_.end());
        taken_ = order_.size();
        mu_->unlock();
        if (take.empty()) continue;
        sg4::this_actor::sleep_for(p_.negotiation_s);
        size_t first = 0;
        while (first < take.size()) {
            double fused = 0;
            size_t last = first;
            while (last < take.size() && (last == first || fused + (double)bytes_[take[last]] <= p_.fusion_bytes))
                fused += (double)bytes_[take[last++]];
            sg4::this_actor::sleep_for(p_.allreduce(fused));
            allreduces_++;
            mu_->lock();
            done_ += last - first;
            if (done_ == ntensors) { // the step's last gradient: every rank may go on
                have_.assign(ntensors, 0);
                order_.clear();
                taken_ = done_ = 0;
                step_++;
                cv_->notify_all();
            }
            mu_->unlock();
            first = last;
        }
    }
}

}  // namespace mlcsim
