// Time and memory of whole simulated iterations at growing scale: GPT-3 175B (the bundled
// default experiment: TP8 x PP8, interleaved, flow-level network) on DGX H100 clusters of 256 to
// 16,384 GPUs, data parallelism filling the cluster at 16 microbatches per replica.
//   build/bin/bench_replay [max_gpus] [experiment.yaml]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "api/inputs.hpp"
#include "api/run.hpp"
#include "bench_common.hpp"

int main(int argc, char** argv) {
    const int max_gpus = argc > 1 ? std::atoi(argv[1]) : 16384;
    const std::string experiment =
        argc > 2 ? argv[2] : (cs::api::data_root() / "workloads" / "default.yaml").string();
    std::printf("%-7s %-5s %-9s %-9s %-11s %-12s %-10s %-12s\n", "GPUs", "dp", "load s", "sim s",
                "events", "iteration s", "MFU", "peak RSS MiB");
    for (int gpus = 256; gpus <= max_gpus; gpus *= 4) {
        const int dp = gpus / 64;
        const std::vector<std::string> sets = {
            "topology.nodes=" + std::to_string(gpus / 8), "parallelism.dp=" + std::to_string(dp),
            "training.global_batch_size=" + std::to_string(16 * dp)};
        const auto t0 = std::chrono::steady_clock::now();
        const auto spec = cs::workload::load_experiment(experiment, sets);
        const auto t1 = std::chrono::steady_clock::now();
        const auto summary = cs::api::run(spec, {}).summary;
        const auto t2 = std::chrono::steady_clock::now();
        std::printf("%-7d %-5d %-9.3f %-9.3f %-11llu %-12.4f %-10.4f %-12.1f\n", gpus, dp,
                    std::chrono::duration<double>(t1 - t0).count(),
                    std::chrono::duration<double>(t2 - t1).count(),
                    static_cast<unsigned long long>(summary.events), summary.iteration_time_s,
                    summary.mfu, cs::bench::peak_rss_mib());
    }
    return 0;
}
