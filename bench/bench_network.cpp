// Flow-level network at scale: 100,000 concurrent flows between random GPU pairs of the
// 24,576-GPU RoCE Clos (topologies/roce-h100-clos.yaml), max-min shared. Prints wall time of the
// first solve (all flows start at once), then of steady-state flow events: the next flow to
// finish ends, a new random flow starts, and rates are re-solved over the connected set.
//   build/bin/bench_network [TOPOLOGY.yaml] [flows] [events]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "config/document.hpp"
#include "network/flow_solver.hpp"
#include "network/network.hpp"
#include "topology/topology_yaml.hpp"

namespace {
std::string default_topology() {
    const std::filesystem::path name = "topologies/roce-h100-clos.yaml";
    std::error_code ec;
    for (auto start : {std::filesystem::read_symlink("/proc/self/exe", ec).parent_path(),
                       std::filesystem::current_path(ec)})
        for (auto dir = start; !dir.empty(); dir = dir.parent_path()) {
            if (std::filesystem::exists(dir / name, ec)) return (dir / name).string();
            if (dir == dir.parent_path()) break;
        }
    return name.string();
}

double peak_rss_mib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A fixed-seed generator so that every run measures the same work.
struct Lcg {
    std::uint64_t s = 0x2545f4914f6cdd1dULL;
    std::uint64_t next() {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return s >> 17;
    }
};
}  // namespace

int main(int argc, char** argv) {
    using namespace cs;
    const std::string path = argc > 1 ? argv[1] : default_topology();
    const int flows = argc > 2 ? std::atoi(argv[2]) : 100'000;
    const int events = argc > 3 ? std::atoi(argv[3]) : 2'000;

    auto t0 = std::chrono::steady_clock::now();
    const auto doc = config::load_document(path);
    const topology::Cluster cluster = topology::load_cluster(doc);
    const double build_s = seconds_since(t0);

    std::vector<double> capacity;
    for (const auto& l : cluster.links())
        capacity.push_back(l.bandwidth.bytes_per_s);
    network::FlowSolver solver(capacity);
    const std::vector<network::NetworkObserver*> no_observers;
    Lcg rng;
    const auto gpus = static_cast<std::uint64_t>(cluster.gpu_count());
    std::vector<topology::LinkId> path_links;
    std::uint64_t flow_counter = 0;
    double hops = 0;
    auto add_random = [&](Time now) {
        int src, dst;
        do {
            src = static_cast<int>(rng.next() % gpus);
            dst = static_cast<int>(rng.next() % gpus);
        } while (src == dst);
        path_links.clear();
        cluster.route(src, dst, flow_counter++, path_links);
        hops += static_cast<double>(path_links.size());
        const double bytes = 1e6 * static_cast<double>(1 + rng.next() % 100);  // 1-100 MB
        solver.add(path_links, bytes, 0, now);
    };

    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < flows; ++i)
        add_random(Time::zero());
    const double add_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    solver.recompute(Time::zero(), no_observers);
    const double first_solve_s = seconds_since(t0);

    const auto rerated_before = solver.rerated_flows();
    t0 = std::chrono::steady_clock::now();
    Time now = Time::zero();
    for (int e = 0; e < events; ++e) {
        const auto f = solver.next_finishing();
        now = solver.finish_time(f);
        solver.remove(f);
        add_random(now);
        solver.recompute(now, no_observers);
    }
    const double events_s = seconds_since(t0);
    const double rerated = static_cast<double>(solver.rerated_flows() - rerated_before) / events;

    std::printf("bench_network: %s\n", path.c_str());
    std::printf("%-44s %14s\n", "measure", "value");
    std::printf("%-44s %14d\n", "GPUs", cluster.gpu_count());
    std::printf("%-44s %14zu\n", "directed links", cluster.links().size());
    std::printf("%-44s %14d\n", "concurrent flows", flows);
    std::printf("%-44s %14.2f\n", "mean hops per flow", hops / static_cast<double>(flow_counter));
    std::printf("%-44s %14.3f\n", "cluster build (s)", build_s);
    std::printf("%-44s %14.3f\n", "route + add 100k flows (s)", add_s);
    std::printf("%-44s %14.3f\n", "first rate solve, all flows (ms)", first_solve_s * 1e3);
    std::printf("%-44s %14d\n", "flow events (end one, start one)", events);
    std::printf("%-44s %14.3f\n", "time per flow event incl. re-solve (ms)",
                events_s / events * 1e3);
    std::printf("%-44s %14.0f\n", "flows re-rated per event (connected set)", rerated);
    std::printf("%-44s %14.1f\n", "re-rated flows per second (M)",
                rerated * events / events_s * 1e-6);
    std::printf("%-44s %14.3f\n", "simulated time reached (ms)", now.seconds() * 1e3);
    std::printf("%-44s %14.0f\n", "peak RSS (MiB)", peak_rss_mib());
    return 0;
}
