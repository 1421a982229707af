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

#include "config/document.hpp"
#include "topology/summary.hpp"
#include "topology/topology_yaml.hpp"

namespace {
// The bundled file: the first ancestor of the executable's folder (or of the working folder)
// holding topologies/roce-h100-clos.yaml.
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

double cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double peak_rss_mib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}
}  // namespace

int main(int argc, char** argv) {
    using Clock = std::chrono::steady_clock;
    const std::string path = argc > 1 ? argv[1] : default_topology();
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
        std::printf("\npeak RSS: %.1f MiB\n", peak_rss_mib());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_topology: %s\n", e.what());
        return 1;
    }
    return 0;
}
