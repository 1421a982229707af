// Flow-level network at scale: 100,000 concurrent flows on the 24,576-GPU RoCE Clos
// (topologies/roce-h100-clos.yaml), max-min shared. Prints wall time of the first solve (all
// flows start at once), then of steady-state flow events: the next flow to finish ends, a new
// flow starts, and rates are re-solved over the connected set. `events` counts random-pair events;
// the in-node pattern runs 100 times as many.
//   build/bin/bench_network [TOPOLOGY.yaml] [flows] [events]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "config/document.hpp"
#include "network/flow_solver.hpp"
#include "network/network.hpp"
#include "topology/topology_yaml.hpp"

namespace {

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
    const std::string path =
        argc > 1 ? argv[1] : cs::bench::bundled("topologies/roce-h100-clos.yaml");
    const int flows = argc > 2 ? std::atoi(argv[2]) : 100'000;
    const int events = argc > 3 ? std::atoi(argv[3]) : 2'000;

    auto t0 = std::chrono::steady_clock::now();
    const auto doc = config::load_document(path);
    const topology::Cluster cluster = topology::load_cluster(doc);
    const double build_s = seconds_since(t0);

    std::vector<double> capacity;
    for (const auto& l : cluster.links())
        capacity.push_back(l.bandwidth.bytes_per_s);
    const auto gpus = static_cast<std::uint64_t>(cluster.gpu_count());
    const std::uint64_t per_node =
        gpus / static_cast<std::uint64_t>(std::max(1, cluster.node_count()));

    std::printf("bench_network: %s (%d GPUs, %zu directed links)\n", path.c_str(),
                cluster.gpu_count(), cluster.links().size());
    std::printf("cluster build %.3f s\n\n", build_s);
    std::printf("%-11s %8s %6s %10s %12s %10s %14s %12s %9s\n", "pairs", "flows", "hops", "add (s)",
                "solve (ms)", "events", "per event (ms)", "re-rated/ev", "RSS (MiB)");
    // Two traffic patterns: uniformly random GPU pairs (every flow connected to every other
    // through the spines and cores: the worst case for the incremental solve) and pairs inside one
    // server (connected sets of one node's flows, like tensor-parallel traffic).
    for (const bool node_local : {false, true}) {
        network::FlowSolver solver(capacity);
        const std::vector<network::NetworkObserver*> no_observers;
        Lcg rng;
        std::vector<topology::LinkId> path_links;
        std::uint64_t flow_counter = 0;
        double hops = 0;
        auto add_random = [&](Time now) {
            int src, dst;
            do {
                if (node_local) {
                    const std::uint64_t base = rng.next() % (gpus / per_node) * per_node;
                    src = static_cast<int>(base + rng.next() % per_node);
                    dst = static_cast<int>(base + rng.next() % per_node);
                } else {
                    src = static_cast<int>(rng.next() % gpus);
                    dst = static_cast<int>(rng.next() % gpus);
                }
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
        const int n_events = node_local ? events * 100 : events;
        t0 = std::chrono::steady_clock::now();
        for (int e = 0; e < n_events; ++e) {
            const auto f = solver.next_finishing();
            const Time now = solver.finish_time(f);
            solver.remove(f);
            add_random(now);
            solver.recompute(now, no_observers);
        }
        const double events_s = seconds_since(t0);
        const double rerated =
            static_cast<double>(solver.rerated_flows() - rerated_before) / n_events;
        std::printf("%-11s %8d %6.2f %10.3f %12.3f %10d %14.4f %12.0f %9.0f\n",
                    node_local ? "in-node" : "random", flows,
                    hops / static_cast<double>(flow_counter), add_s, first_solve_s * 1e3, n_events,
                    events_s / n_events * 1e3, rerated, cs::bench::peak_rss_mib());
    }
    return 0;
}
