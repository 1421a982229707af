// Time and memory of whole simulated iterations at growing scale.
//   build/bin/bench_replay [max_gpus] [experiment.yaml] [min_gpus] [replica_gpus] [--no-fold]
//                          [--microbatches N] [--set KEY=VALUE ...]
// Default: GPT-3 175B (the bundled default experiment: TP8 x PP8, interleaved, flow-level network)
// on DGX H100 clusters of 256 to 16,384 GPUs. Every row multiplies the GPUs by 4 from min_gpus
// (default: one replica's GPUs x 4), data parallelism filling the cluster at 16 microbatches
// per replica (--microbatches; global batch = microbatches x dp: the experiment's micro batch
// size must be 1), 8 GPUs per node; replica_gpus (default 64) must be the experiment's
// tp x pp x cp. --set overrides are applied to every row (--set topology.routing=d_mod_k).
//   build/bin/bench_replay 16384 "" 16384 --microbatches 64 --set topology.routing=d_mod_k
// is the issue-41 row: the default experiment at 16,384 GPUs with 64 microbatches per replica.
//   build/bin/bench_replay 131072 workloads/llama3-405b-128l-bench.yaml 2048 128
// gives the Llama 3 405B rows (TP8 x PP16) at 2,048, 8,192, 32,768 and 131,072 GPUs.
// Columns: wall and CPU seconds of loading (experiment and cluster) and of the run, engine
// events, the iteration, MFU, the process's peak RSS so far, and the members each transfer stood
// for (member folding, docs/performance-history.md); then the flow solver's work (zeros outside
// `flow`): max-min re-solves, flows re-rated per re-solve (summed over its rounds), the run's CPU
// time per re-solve (an upper bound: the engine and the replay are in it), the most flows active at
// once and the solver's links.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "bench_common.hpp"
#include "ingest/inputs.hpp"
#include "session/run.hpp"

namespace {
double cpu_s() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args, more;
    bool fold = true;
    int microbatches = 16;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--no-fold") {
            fold = false;
        } else if ((a == "--set" || a == "--microbatches") && i + 1 < argc) {
            if (a == "--set")
                more.emplace_back(argv[++i]);
            else
                microbatches = std::atoi(argv[++i]);
        } else {
            args.push_back(a);
        }
    }
    if (microbatches < 1) {
        std::fprintf(stderr, "bench_replay: --microbatches needs a whole number >= 1\n");
        return 2;
    }
    const int max_gpus = !args.empty() ? std::atoi(args[0].c_str()) : 16384;
    const std::string experiment =
        args.size() > 1 && !args[1].empty()
            ? args[1]
            : (cs::api::data_root() / "workloads" / "default.yaml").string();
    // GPUs of one replica (tp x pp x cp of the experiment) and its micro batch size.
    const int replica = args.size() > 3 ? std::atoi(args[3].c_str()) : 64;
    const int mbs = 1;
    const int min_gpus = args.size() > 2 ? std::atoi(args[2].c_str()) : replica * 4;
    std::printf(
        "%-7s %-5s %-7s %-7s %-8s %-8s %-10s %-12s %-7s %-8s %-5s %-9s %-8s %-8s %-8s "
        "%-9s\n",
        "GPUs", "dp", "load s", "load cpu", "sim s", "sim cpu", "events", "iteration s", "MFU",
        "RSS MiB", "fold", "re-solves", "rerated", "us/solve", "peak fl", "links");
    for (int gpus = min_gpus; gpus <= max_gpus; gpus *= 4) {
        const int dp = gpus / replica;
        std::vector<std::string> sets = {
            "topology.nodes=" + std::to_string(gpus / 8), "parallelism.dp=" + std::to_string(dp),
            "training.global_batch_size=" + std::to_string(microbatches * dp * mbs)};
        sets.insert(sets.end(), more.begin(), more.end());
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = cpu_s();
        const auto spec = cs::workload::load_experiment(experiment, sets);
        const auto t1 = std::chrono::steady_clock::now();
        const double c1 = cpu_s();
        cs::api::RunOptions options;
        options.fold = fold;
        const auto result = cs::api::run(spec, options);
        const auto& summary = result.summary;
        const auto& solver = result.solver;
        const auto t2 = std::chrono::steady_clock::now();
        const double c2 = cpu_s();
        const double solves = static_cast<double>(solver.recomputes);
        std::printf(
            "%-7d %-5d %-7.3f %-8.3f %-8.3f %-8.3f %-10llu %-12.4f %-7.4f %-8.1f %-5d "
            "%-9llu %-8.1f %-8.2f %-8llu %-9llu\n",
            gpus, dp, std::chrono::duration<double>(t1 - t0).count(), c1 - c0,
            std::chrono::duration<double>(t2 - t1).count(), c2 - c1,
            static_cast<unsigned long long>(summary.events), summary.iteration_time_s, summary.mfu,
            cs::bench::peak_rss_mib(), summary.fold_copies,
            static_cast<unsigned long long>(solver.recomputes),
            solves > 0 ? static_cast<double>(solver.rerated) / solves : 0.0,
            solves > 0 ? (c2 - c1) * 1e6 / solves : 0.0,
            static_cast<unsigned long long>(solver.peak_flows),
            static_cast<unsigned long long>(solver.links));
        std::fflush(stdout);
    }
    return 0;
}
