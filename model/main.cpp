// mlcsim: ml_comm's algorithms and scheduling on a SimGrid platform, sizes only.
//
//   mlcsim PLATFORM.xml --nodes N [options] sweep SIZE...      allreduce of each size
//   mlcsim PLATFORM.xml --nodes N [options] train TENSORS_FILE  training steps
//
// Hosts must be named node-0 .. node-(H-1) (tools/project_platforms.py writes such
// files); rank r runs on host r / --ranks-per-node, or on the host --placement FILE
// gives it (one host index per line, by rank). TENSORS_FILE: one line per gradient in
// the order backprop produces them, "index elements backward_seconds" (index: the
// tensor's place in the request's layout; the seconds of backprop before it arrives);
// --forward S is the forward pass and the update. --compute-factors FILE: one line per
// rank, each step's factor on that rank's compute (the node terms' noise, written by
// tools/project_noise.py). --pcie-bps B: gradients cross PCIe at B bytes/s each way
// (device_copies.hpp). --horovod: Horovod's fusion and cycle instead of ml_comm's team
// (horovod_cycle.hpp). Prints one JSON object.
#include <simgrid/s4u.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "device_copies.hpp"
#include "horovod_cycle.hpp"
#include "team_mirror.hpp"

namespace sg4 = simgrid::s4u;
using namespace mlcsim;

namespace {

struct Run {
    TeamConfig team;
    std::string mode;
    std::vector<int64_t> sizes;                  // sweep: bytes
    std::vector<int64_t> counts;                 // train: elements per tensor, layout order
    std::vector<int> order;                      // train: tensor indices in arrival order
    std::vector<double> backward;                // train: seconds before each arrival
    double forward_s = 0;
    std::vector<std::vector<double>> compute_factors; // [rank][step]; empty: 1
    int steps = 3, iters = 2;
    bool pipelined = false;
    bool after_backprop = false; // one blocking allreduce of every gradient after backprop
    bool list_after_backprop = false; // the team's request of every gradient, after backprop
    int ranks_per_node = 1;
    std::vector<int> placement;  // host index of each rank; empty: rank / ranks_per_node
    double pcie_bytes_per_s = 0; // 0: the gradients are in host memory
    bool horovod = false;
    HorovodParams hvd;
};

Run run;
std::vector<RankStats> stats;
std::vector<std::vector<double>> sweep_times;    // [size][rank]
std::vector<std::vector<double>> step_ends;      // [rank][step]
std::vector<std::vector<double>> backprop_ends;  // [rank][step]
std::vector<std::vector<double>> comm_starts, step_starts;
std::vector<std::shared_ptr<Request>> last_requests; // rank 0's, per step
std::unique_ptr<HorovodCycle> horovod;

double compute(double seconds) {
    if (seconds <= 0) return 0;
    if (node.compute_on_core) sg4::this_actor::execute(seconds * sg4::this_actor::get_host()->get_speed());
    else sg4::this_actor::sleep_for(seconds);
    return seconds;
}

void sweep_rank(int rank, Team &team) {
    for (size_t i = 0; i < run.sizes.size(); i++) {
        std::vector<int64_t> counts{run.sizes[i] / 4};
        double t = 0;
        for (int it = 0; it < run.iters; it++) {
            double t0 = sg4::Engine::get_clock();
            auto req = team.submit(counts, false, true);
            team.wait(*req);
            t = sg4::Engine::get_clock() - t0; // the last call: steady state
        }
        sweep_times[i][rank] = t;
    }
}

double compute_factor(int rank, int step) {
    if (run.compute_factors.empty()) return 1.0;
    return run.compute_factors[rank][step];
}

void train_rank(int rank, Team &team) {
    DeviceCopies copies(team, run.pcie_bytes_per_s);
    // The core's pipelined step decides what each step waits for (csrc/pipeline): its
    // handles are the requests in flight, kept alive here.
    mlc_pipeline pipeline;
    mlc_pipeline_init(&pipeline, run.pipelined ? 0 : run.steps, run.steps);
    std::map<void *, std::shared_ptr<Request>> in_flight;
    for (int s = 0; s < run.steps; s++) {
        // This node's compute in this step: the node terms' factor (its speed, the step's
        // detours, the run's), so every synchronous step waits for its slowest node.
        const double scale = compute_factor(rank, s);
        step_starts[rank][s] = sg4::Engine::get_clock();
        compute(run.forward_s * scale);
        std::shared_ptr<Request> req;
        for (size_t k = 0; k < run.order.size(); k++) {
            compute(run.backward[k] * scale);
            if (run.horovod) horovod->ready(run.order[k]);
            if (run.after_backprop || run.list_after_backprop || run.horovod) continue;
            if (k == 0) req = team.submit(run.counts, true, false);
            copies.arrive(req, run.order[k], run.counts[run.order[k]]);
        }
        backprop_ends[rank][s] = sg4::Engine::get_clock();
        if (run.list_after_backprop) { // one call on the whole list, as a C API taking it does
            req = team.submit(run.counts, true, false);
            for (int t : run.order) copies.arrive(req, t, run.counts[t]);
        }
        if (run.horovod) {
            horovod->wait_step();
            comm_starts[rank][s] = backprop_ends[rank][s];
            step_ends[rank][s] = sg4::Engine::get_clock();
            continue;
        }
        if (run.after_backprop) { // what a script calling MPI_Allreduce on a flat buffer does
            int64_t total = 0;
            for (auto c : run.counts) total += c;
            req = team.submit({total}, false, true);
        }
        // The reduced gradients go back to the device once their request is done.
        const mlc_pipeline_turn turn = mlc_pipeline_next(&pipeline, 0);
        if (turn.finish) {
            const std::shared_ptr<Request> done = in_flight[turn.finish];
            in_flight.erase(turn.finish);
            team.wait(*done);
            copies.copy_back(*done, stats[rank]);
        }
        if (turn.reduce_now) {
            team.wait(*req);
            copies.copy_back(*req, stats[rank]);
        }
        if (turn.start) {
            in_flight[req.get()] = req;
            mlc_pipeline_started(&pipeline, req.get());
        }
        comm_starts[rank][s] = req->t_start;
        if (rank == 0) last_requests.push_back(req);
        step_ends[rank][s] = sg4::Engine::get_clock();
    }
    for (auto &[handle, req] : in_flight) team.wait(*req);
    copies.shutdown();
}

// As benchmarks/train_scaling.py: the share of rank 0's batch time that falls inside
// its steps' compute windows [step start, last gradient], steps after the first.
double hidden_fraction() {
    double busy = 0, hidden = 0;
    for (auto [b0, b1] : stats[0].batches) {
        if (run.steps > 1 && b0 < step_starts[0][1]) continue;
        busy += b1 - b0;
        for (int s = 1; s < run.steps; s++)
            hidden += std::max(0.0, std::min(b1, backprop_ends[0][s]) - std::max(b0, step_starts[0][s]));
    }
    return busy > 0 ? hidden / busy : 0;
}

// The share of rank 0's batches (steps after the first) that start before its backprop ends.
double batches_before_backprop_end() {
    int before = 0, all = 0;
    for (auto [b0, b1] : stats[0].batches) {
        (void)b1;
        int s = 0;
        while (s + 1 < run.steps && b0 >= step_starts[0][s + 1]) s++;
        if (s == 0 && run.steps > 1) continue;
        all++;
        before += b0 < backprop_ends[0][s];
    }
    return all ? (double)before / all : 0;
}

void rank_main(int rank) {
    Team team(rank, run.team, &stats[rank]);
    if (run.mode == "sweep") sweep_rank(rank, team);
    else train_rank(rank, team);
    team.shutdown();
}

double arg_double(char **argv, int &i) { return std::strtod(argv[++i], nullptr); }

int algorithm_id(const char *name) {
    if (!std::strcmp(name, "auto")) return MLC_ALG_AUTO;
    if (!std::strcmp(name, "ring")) return MLC_ALG_RING;
    if (!std::strcmp(name, "rd")) return MLC_ALG_RECURSIVE_DOUBLING;
    if (!std::strcmp(name, "rabenseifner")) return MLC_ALG_RABENSEIFNER;
    std::fprintf(stderr, "unknown algorithm %s (auto, ring, rd, rabenseifner)\n", name);
    std::exit(2);
}

void usage() {
    std::fprintf(stderr, "usage: mlcsim PLATFORM --nodes RANKS [options] sweep BYTES... | train TENSORS_FILE\n");
    std::exit(2);
}

// One line per rank: that rank's compute factor in each step.
void read_compute_factors(const char *path) {
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
        std::istringstream in(line);
        std::vector<double> row;
        double x;
        while (in >> x) row.push_back(x);
        if (!row.empty()) run.compute_factors.push_back(row);
    }
}

// Horovod's fused allreduce: "bytes seconds" per line, bytes rising.
void read_allreduce_table(const char *path) {
    std::ifstream f(path);
    double b, t;
    while (f >> b >> t) run.hvd.allreduce_s.push_back({b, t});
    for (size_t k = 1; k < run.hvd.allreduce_s.size(); k++)
        if (run.hvd.allreduce_s[k].first <= run.hvd.allreduce_s[k - 1].first) run.hvd.allreduce_s.clear();
    if (run.hvd.allreduce_s.empty()) {
        std::fprintf(stderr, "%s: need lines \"bytes seconds\", bytes rising\n", path);
        std::exit(2);
    }
}

void read_placement(const char *path) {
    std::ifstream f(path);
    int h;
    while (f >> h) run.placement.push_back(h);
}

void read_tensors(const char *path) {
    std::ifstream f(path);
    int index;
    int64_t c;
    double b;
    while (f >> index >> c >> b) {
        if (index < 0 || index > 1000000) break;
        if ((int)run.counts.size() <= index) run.counts.resize(index + 1, -1);
        run.counts[index] = c;
        run.order.push_back(index);
        run.backward.push_back(b);
    }
    bool complete = !run.counts.empty();
    for (auto count : run.counts) complete = complete && count >= 0;
    if (!complete || run.order.size() != run.counts.size()) {
        std::fprintf(stderr, "%s: need lines \"index elements backward_seconds\", each index 0..n-1 once\n", path);
        std::exit(2);
    }
}

void print_stats(FILE *out) {
    std::fprintf(out, "\"data_messages_per_rank\": %.1f, \"agree_messages_per_rank_per_request\": %.3f",
                 (double)stats[0].data.messages, (double)stats[0].agree.messages / std::max<int64_t>(1, stats[0].requests));
}

}  // namespace

int main(int argc, char **argv) {
    sg4::Engine e(&argc, argv);
    if (argc < 4) usage();
    const char *platform = argv[1];
    int i = 2;
    for (; i < argc && argv[i][0] == '-'; i++) {
        std::string a = argv[i];
        if (a == "--nodes") run.team.nranks = std::atoi(argv[++i]);
        else if (a == "--threads") run.team.nthreads = std::atoi(argv[++i]);
        else if (a == "--algorithm") run.team.algorithm = algorithm_id(argv[++i]);
        else if (a == "--bf16") run.team.compression = MLC_COMPRESSION_BF16;
        else if (a == "--chunk") run.team.chunk_bytes = (int64_t)arg_double(argv, i);
        else if (a == "--fusion") run.team.fusion_bytes = (int64_t)arg_double(argv, i);
        else if (a == "--latency-bytes") run.team.latency_bytes = (int64_t)arg_double(argv, i);
        else if (a == "--rabenseifner-bytes") run.team.rabenseifner_bytes = (int64_t)arg_double(argv, i);
        else if (a == "--agree") {
            std::string v = argv[++i];
            run.team.agree = v == "off" ? Agree::off : v == "tree" ? Agree::tree : Agree::alltoall;
        } else if (a == "--sample") run.team.sample_batches = std::atoi(argv[++i]);
        else if (a == "--reduce-bps") node.reduce_bytes_per_s = arg_double(argv, i);
        else if (a == "--convert-bps") node.convert_bytes_per_s = arg_double(argv, i);
        else if (a == "--copy-bps") node.copy_bytes_per_s = arg_double(argv, i);
        else if (a == "--send-overhead") node.send_overhead_s = arg_double(argv, i);
        else if (a == "--recv-overhead") node.recv_overhead_s = arg_double(argv, i);
        else if (a == "--cpu-per-byte") node.cpu_per_byte_s = arg_double(argv, i);
        else if (a == "--comm-weight") node.comm_weight = arg_double(argv, i);
        else if (a == "--compute-on-core") node.compute_on_core = true;
        else if (a == "--forward") run.forward_s = arg_double(argv, i);
        else if (a == "--compute-factors") read_compute_factors(argv[++i]);
        else if (a == "--ranks-per-node") run.ranks_per_node = std::atoi(argv[++i]);
        else if (a == "--placement") read_placement(argv[++i]);
        else if (a == "--pcie-bps") run.pcie_bytes_per_s = arg_double(argv, i);
        else if (a == "--horovod") run.horovod = true;
        else if (a == "--fusion-threshold") run.hvd.fusion_bytes = arg_double(argv, i);
        else if (a == "--cycle") run.hvd.cycle_s = arg_double(argv, i);
        else if (a == "--negotiation") run.hvd.negotiation_s = arg_double(argv, i);
        else if (a == "--allreduce-table") read_allreduce_table(argv[++i]);
        else if (a == "--steps") run.steps = std::atoi(argv[++i]);
        else if (a == "--iters") run.iters = std::atoi(argv[++i]);
        else if (a == "--pipelined") run.pipelined = true;
        else if (a == "--after-backprop") run.after_backprop = true;
        else if (a == "--list-after-backprop") run.list_after_backprop = true;
        else usage();
    }
    if (i >= argc) usage();
    run.mode = argv[i++];
    if (run.mode == "sweep") {
        for (; i < argc; i++) run.sizes.push_back((int64_t)std::strtod(argv[i], nullptr));
    } else if (run.mode == "train" && i < argc) {
        read_tensors(argv[i]);
    } else {
        usage();
    }
    e.load_platform(platform);
    const int n = run.team.nranks;
    stats.resize(n);
    sweep_times.assign(run.sizes.size(), std::vector<double>(n, 0));
    step_ends.assign(n, std::vector<double>(run.steps, 0));
    backprop_ends = comm_starts = step_starts = step_ends;
    if (!run.compute_factors.empty()) {
        bool fits = (int)run.compute_factors.size() == n;
        for (auto &row : run.compute_factors) fits = fits && (int)row.size() >= run.steps;
        if (!fits) {
            std::fprintf(stderr, "--compute-factors: need %d lines of at least %d factors\n", n, run.steps);
            return 2;
        }
    }
    if (!run.placement.empty() && (int)run.placement.size() != n) {
        std::fprintf(stderr, "--placement: need %d host indices, got %zu\n", n, run.placement.size());
        return 2;
    }
    if (run.ranks_per_node < 1) usage();
    for (int r = 0; r < n; r++) {
        const int host = run.placement.empty() ? r / run.ranks_per_node : run.placement[r];
        sg4::Host *h = e.host_by_name_or_null("node-" + std::to_string(host));
        if (!h) {
            std::fprintf(stderr, "%s has no host node-%d for rank %d\n", platform, host, r);
            return 2;
        }
        sg4::Actor::create("rank" + std::to_string(r), h, [r] { rank_main(r); });
    }
    if (run.horovod && run.mode == "train") {
        std::vector<int64_t> bytes;
        for (auto c : run.counts) bytes.push_back(4 * c);
        horovod = std::make_unique<HorovodCycle>(n, bytes, run.hvd);
        sg4::Actor::create("horovod", e.host_by_name("node-0"), [] { horovod->coordinator_main(run.steps); });
    }
    e.run();
    FILE *out = stdout;
    std::fprintf(out, "{\"nodes\": %d, \"mode\": \"%s\", ", n, run.mode.c_str());
    print_stats(out);
    if (run.mode == "sweep") {
        std::fprintf(out, ", \"rows\": [");
        for (size_t s = 0; s < run.sizes.size(); s++) {
            double worst = 0;
            for (double t : sweep_times[s]) worst = std::max(worst, t);
            std::fprintf(out, "%s{\"bytes\": %lld, \"time_s\": %.9g}", s ? ", " : "", (long long)run.sizes[s], worst);
        }
        std::fprintf(out, "]");
    } else {
        std::fprintf(out, ", \"steps\": [");
        for (int s = 0; s < run.steps; s++) {
            double end = 0, bwd = 0, start = 0, prev = 0, done = 0;
            for (int r = 0; r < n; r++) {
                done = std::max(done, step_ends[r][s]); // Horovod's: every allreduce of the step
                end = std::max(end, step_ends[r][s]);
                bwd += backprop_ends[r][s] / n;
                start += comm_starts[r][s] / n;
                prev = std::max(prev, s ? step_ends[r][s - 1] : 0.0);
            }
            if (!run.horovod) done = last_requests[s]->t_done;
            std::fprintf(out,
                         "%s{\"end_s\": %.9g, \"step_s\": %.9g, \"backprop_end_s\": %.9g, \"comm_start_s\": %.9g, "
                         "\"comm_done_s\": %.9g}",
                         s ? ", " : "", end, end - prev, bwd, start, done);
        }
        std::fprintf(out, "], \"hidden_fraction\": %.6f, \"batches_before_backprop_end\": %.6f", hidden_fraction(),
                     batches_before_backprop_end());
        if (horovod) std::fprintf(out, ", \"horovod_allreduces\": %lld", (long long)horovod->allreduces());
    }
    std::fprintf(out, ", \"simulated_s\": %.9g}\n", sg4::Engine::get_clock());
    return 0;
}
