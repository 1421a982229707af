// Builds the 24,576-GPU RoCE Clos (topologies/roce-h100-clos.yaml), summarises it, routes 100,000
// random GPU pairs and prints wall time per phase and peak RSS as a table.
//   build/bin/bench_topology [TOPOLOGY.yaml] [pairs]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "config/document.hpp"
#include "topology/summary.hpp"
#include "topology/topology_yaml.hpp"

namespace {
double cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

}  // namespace

int main(int argc, char** argv) {
    using Clock = std::chrono::steady_clock;
    const std::string path =
        argc > 1 ? argv[1] : cs::bench::bundled("topologies/roce-h100-clos.yaml");
    const long pairs = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 100'000;
    try {
        const auto t0 = Clock::now();
        const double c0 = cpu_ms();
        const auto doc = cs::config::load_document(path);
        const cs::topology::Cluster cluster = cs::topology::load_cluster(doc);
        const auto t1 = Clock::now();
        const double c1 = cpu_ms();
        const cs::topology::TopologySummary summary = cs::topology::summarize(cluster);
        const auto t2 = Clock::now();
        const double c2 = cpu_ms();
        std::mt19937_64 rng(42);
        std::uniform_int_distribution<int> gpu(0, cluster.gpu_count() - 1);
        std::vector<cs::topology::LinkId> route;
        std::size_t hops = 0;
        for (long i = 0; i < pairs; ++i) {
            route.clear();
            cluster.route(gpu(rng), gpu(rng), static_cast<std::uint64_t>(i), route);
            hops += route.size();
        }
        const auto t3 = Clock::now();
        const double c3 = cpu_ms();
        auto ms = [](auto a, auto b) {
            return std::chrono::duration<double, std::milli>(b - a).count();
        };
        std::printf("| phase | wall ms | cpu ms |\n|---|---|---|\n");
        std::printf(
            "| load + build + checks (%d GPUs, %zu devices, %zu directed links) | %.1f | "
            "%.1f |\n",
            cluster.gpu_count(), cluster.devices().size(), cluster.links().size(), ms(t0, t1),
            c1 - c0);
        std::printf("| summarize (diameter %d hops) | %.1f | %.1f |\n", summary.diameter_hops,
                    ms(t1, t2), c2 - c1);
        std::printf("| route %ld random pairs (mean %.2f hops) | %.1f | %.1f |\n", pairs,
                    pairs ? static_cast<double>(hops) / static_cast<double>(pairs) : 0.0,
                    ms(t2, t3), c3 - c2);
        std::printf("| total | %.1f | %.1f |\n", ms(t0, t3), c3 - c0);
        std::printf("\npeak RSS: %.1f MiB\n", cs::bench::peak_rss_mib());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_topology: %s\n", e.what());
        return 1;
    }
    return 0;
}
