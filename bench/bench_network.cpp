// Flow-level network at scale: 100,000 concurrent flows on the 24,576-GPU RoCE Clos
// (topologies/roce-h100-clos.yaml), max-min shared. Prints the time of the first solve (all
// flows start at once), then of steady-state flow events: the next flow to finish ends, a new
// flow starts, and rates are re-solved. Each traffic pattern runs with the incremental strategy
// (the default) and with the component strategy (re-solve every flow connected to a change),
// then checks the final rates against a from-scratch solve of the flows still active.
// `events` counts random-pair events (at most 50 for the component strategy, whose events take
// a third of a second each); the in-node pattern runs 100 times as many.
//   build/bin/bench_network [TOPOLOGY.yaml] [flows] [events]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "config/document.hpp"
#include "network/flow_solver.hpp"
#include "network/network.hpp"
#include "topology/topology_yaml.hpp"

namespace {

// Wall and CPU seconds since construction: the build machine is shared, so CPU time is the
// figure that does not depend on the load.
struct Stopwatch {
    std::chrono::steady_clock::time_point wall0 = std::chrono::steady_clock::now();
    double cpu0 = cpu_now();
    static double cpu_now() {
        timespec ts{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
    }
    double wall() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    }
    double cpu() const { return cpu_now() - cpu0; }
};

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
    using network::FlowSolver;
    const std::string path =
        argc > 1 ? argv[1] : cs::bench::bundled("topologies/roce-h100-clos.yaml");
    const int flows = argc > 2 ? std::atoi(argv[2]) : 100'000;
    const int events = argc > 3 ? std::atoi(argv[3]) : 2'000;

    const Stopwatch build_clock;
    const auto doc = config::load_document(path);
    const topology::Cluster cluster = topology::load_cluster(doc);
    const double build_s = build_clock.wall();

    std::vector<double> capacity;
    for (const auto& l : cluster.links())
        capacity.push_back(l.bandwidth.bytes_per_s);
    const auto gpus = static_cast<std::uint64_t>(cluster.gpu_count());
    const std::uint64_t per_node =
        gpus / static_cast<std::uint64_t>(std::max(1, cluster.node_count()));

    std::printf("bench_network: %s (%d GPUs, %zu directed links)\n", path.c_str(),
                cluster.gpu_count(), cluster.links().size());
    std::printf("cluster build %.3f s\n\n", build_s);
    std::printf("%-8s %-11s %7s %5s %13s %7s %17s %11s %10s %9s %6s\n", "pairs", "strategy",
                "flows", "hops", "solve ms wall/cpu", "events", "per event ms wall/cpu",
                "re-rated/ev", "checked/ev", "max diff", "RSS MiB");
    // Two traffic patterns: uniformly random GPU pairs (every flow connected to every other
    // through the spines and cores: the worst case for a connected-set re-solve) and pairs inside
    // one server (connected sets of one node's flows, like tensor-parallel traffic).
    for (const bool node_local : {false, true}) {
        for (const auto strategy :
             {FlowSolver::Strategy::Incremental, FlowSolver::Strategy::Component}) {
            FlowSolver solver(capacity, strategy);
            const std::vector<network::NetworkObserver*> no_observers;
            Lcg rng;
            std::vector<topology::LinkId> path_links;
            std::vector<std::vector<topology::LinkId>> path_of;  // by flow id, for the check
            std::uint64_t flow_counter = 0;
            double hops = 0;
            double bytes = 0;
            auto pick = [&] {
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
                bytes = 1e6 * static_cast<double>(1 + rng.next() % 100);  // 1-100 MB
            };
            auto add_picked = [&](Time now) {
                const auto id = solver.add(path_links, bytes, 0, now);
                if (id >= path_of.size()) path_of.resize(id + 1);
                path_of[id] = path_links;
            };

            for (int i = 0; i < flows; ++i) {
                pick();
                add_picked(Time::zero());
            }
            const Stopwatch first;
            solver.recompute(Time::zero(), no_observers);
            const double first_wall = first.wall(), first_cpu = first.cpu();

            const auto rerated_before = solver.rerated_flows();
            const auto checked_before = solver.checked_flows();
            const bool component = strategy == FlowSolver::Strategy::Component;
            const int n_events =
                node_local ? events * 100 : (component ? std::min(events, 50) : events);
            // Routing the new flow is not the solver's work: it happens before the clock runs.
            double events_wall = 0, events_cpu = 0;
            for (int e = 0; e < n_events; ++e) {
                const auto f = solver.next_finishing();
                const Time now = solver.finish_time(f);
                pick();
                const Stopwatch clock;
                solver.remove(f, now);
                path_of[f].clear();
                add_picked(now);
                solver.recompute(now, no_observers);
                events_wall += clock.wall();
                events_cpu += clock.cpu();
            }
            const double rerated =
                static_cast<double>(solver.rerated_flows() - rerated_before) / n_events;
            const double checked =
                static_cast<double>(solver.checked_flows() - checked_before) / n_events;

            // The same flows solved from scratch: the largest relative difference of a rate.
            FlowSolver fresh(capacity, FlowSolver::Strategy::Component);
            std::vector<std::pair<FlowSolver::FlowId, FlowSolver::FlowId>> pairs;
            for (FlowSolver::FlowId id = 0; id < path_of.size(); ++id) {
                if (path_of[id].empty()) continue;  // ended
                pairs.emplace_back(id, fresh.add(path_of[id], 1.0, 0, Time::zero()));
            }
            fresh.recompute(Time::zero(), no_observers);
            double max_diff = 0;
            for (const auto& [mine, theirs] : pairs)
                max_diff = std::max(max_diff, std::abs(solver.rate(mine) - fresh.rate(theirs)) /
                                                  fresh.rate(theirs));

            std::printf(
                "%-8s %-11s %7d %5.2f %7.1f/%-5.1f %7d %9.4f/%-7.4f %11.0f %10.0f %9.1e %6.0f\n",
                node_local ? "in-node" : "random", component ? "component" : "incremental", flows,
                hops / static_cast<double>(flow_counter), first_wall * 1e3, first_cpu * 1e3,
                n_events, events_wall / n_events * 1e3, events_cpu / n_events * 1e3, rerated,
                checked, max_diff, cs::bench::peak_rss_mib());
        }
    }
    return 0;
}
