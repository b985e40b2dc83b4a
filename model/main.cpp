// mlcsim: ml_comm's algorithms and scheduling on a SimGrid platform, sizes only.
//
//   mlcsim PLATFORM.xml --nodes N [options] sweep SIZE...      allreduce of each size
//   mlcsim PLATFORM.xml --nodes N [options] train TENSORS_FILE  training steps
//
// Hosts must be named node-0 .. node-(N-1) (tools/project_platforms.py writes such
// files). TENSORS_FILE: one line per gradient in the order backprop produces them,
// "index elements backward_seconds" (index: the tensor's place in the request's
// layout; the seconds of backprop before it arrives); --forward S is the forward
// pass and the update. Prints one JSON object.
#include <simgrid/s4u.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

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
    double forward_s = 0, jitter = 0;
    std::vector<double> jitter_samples;          // measured step times over their mean
    int steps = 3, iters = 2;
    bool pipelined = false;
    bool after_backprop = false; // one blocking allreduce of every gradient after backprop
};

Run run;
std::vector<RankStats> stats;
std::vector<std::vector<double>> sweep_times;    // [size][rank]
std::vector<std::vector<double>> step_ends;      // [rank][step]
std::vector<std::vector<double>> backprop_ends;  // [rank][step]
std::vector<std::vector<double>> comm_starts, step_starts;
std::vector<std::shared_ptr<Request>> last_requests; // rank 0's, per step

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

void train_rank(int rank, Team &team) {
    std::mt19937_64 rng(1000003ULL * rank + 17);
    std::normal_distribution<double> spread(1.0, run.jitter);
    std::uniform_int_distribution<size_t> pick(0, std::max<size_t>(1, run.jitter_samples.size()) - 1);
    // The core's pipelined step decides what each step waits for (csrc/pipeline): its
    // handles are the requests in flight, kept alive here.
    mlc_pipeline pipeline;
    mlc_pipeline_init(&pipeline, run.pipelined ? 0 : run.steps, run.steps);
    std::map<void *, std::shared_ptr<Request>> in_flight;
    for (int s = 0; s < run.steps; s++) {
        // Each node's compute in each step: a measured step time drawn at random, or a
        // normal draw; independent across nodes, so every step waits for its slowest.
        double scale = !run.jitter_samples.empty() ? run.jitter_samples[pick(rng)]
                       : run.jitter > 0            ? std::max(0.5, spread(rng))
                                                   : 1.0;
        step_starts[rank][s] = sg4::Engine::get_clock();
        compute(run.forward_s * scale);
        std::shared_ptr<Request> req;
        for (size_t k = 0; k < run.order.size(); k++) {
            compute(run.backward[k] * scale);
            if (run.after_backprop) continue;
            if (k == 0) req = team.submit(run.counts, true, false);
            team.arrive(*req, run.order[k]);
        }
        backprop_ends[rank][s] = sg4::Engine::get_clock();
        if (run.after_backprop) { // what a script calling MPI_Allreduce on a flat buffer does
            int64_t total = 0;
            for (auto c : run.counts) total += c;
            req = team.submit({total}, false, true);
        }
        const mlc_pipeline_turn turn = mlc_pipeline_next(&pipeline);
        if (turn.finish) {
            team.wait(*in_flight[turn.finish]);
            in_flight.erase(turn.finish);
        }
        if (turn.reduce_now) team.wait(*req);
        if (turn.start) {
            in_flight[req.get()] = req;
            mlc_pipeline_started(&pipeline, req.get());
        }
        comm_starts[rank][s] = req->t_start;
        if (rank == 0) last_requests.push_back(req);
        step_ends[rank][s] = sg4::Engine::get_clock();
    }
    for (auto &[handle, req] : in_flight) team.wait(*req);
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
    std::fprintf(stderr, "usage: mlcsim PLATFORM --nodes N [options] sweep BYTES... | train TENSORS_FILE\n");
    std::exit(2);
}

void read_jitter_samples(const char *path) {
    std::ifstream f(path);
    double x;
    while (f >> x) run.jitter_samples.push_back(x);
    if (run.jitter_samples.empty()) {
        std::fprintf(stderr, "mlcsim: %s holds no step-time samples\n", path);
        std::exit(2);
    }
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
        else if (a == "--jitter") run.jitter = arg_double(argv, i);
        else if (a == "--jitter-samples") read_jitter_samples(argv[++i]);
        else if (a == "--steps") run.steps = std::atoi(argv[++i]);
        else if (a == "--iters") run.iters = std::atoi(argv[++i]);
        else if (a == "--pipelined") run.pipelined = true;
        else if (a == "--after-backprop") run.after_backprop = true;
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
    for (int r = 0; r < n; r++) {
        sg4::Host *h = e.host_by_name_or_null("node-" + std::to_string(r));
        if (!h) {
            std::fprintf(stderr, "%s has no host node-%d for %d nodes\n", platform, r, n);
            return 2;
        }
        sg4::Actor::create("rank" + std::to_string(r), h, [r] { rank_main(r); });
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
            double end = 0, bwd = 0, start = 0, prev = 0, done = last_requests[s]->t_done;
            for (int r = 0; r < n; r++) {
                end = std::max(end, step_ends[r][s]);
                bwd += backprop_ends[r][s] / n;
                start += comm_starts[r][s] / n;
                prev = std::max(prev, s ? step_ends[r][s - 1] : 0.0);
            }
            std::fprintf(out,
                         "%s{\"end_s\": %.9g, \"step_s\": %.9g, \"backprop_end_s\": %.9g, \"comm_start_s\": %.9g, "
                         "\"comm_done_s\": %.9g}",
                         s ? ", " : "", end, end - prev, bwd, start, done);
        }
        std::fprintf(out, "], \"hidden_fraction\": %.6f, \"batches_before_backprop_end\": %.6f", hidden_fraction(),
                     batches_before_backprop_end());
    }
    std::fprintf(out, ", \"simulated_s\": %.9g}\n", sg4::Engine::get_clock());
    return 0;
}
