// One simulated iteration of an experiment under one schedule: the run pipeline that every front
// end calls (CLI `run`, `compare`, `sweep`, `validate`, tests, benchmarks).
//
//   plan (workload) -> memory (workload) -> replay (engine, network) -> observers (report)
//   -> summary (report)
//
// Warnings come back as data (RunResult::warnings); nothing here prints or exits.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "replay/prepare.hpp"
#include "report/run_detail.hpp"
#include "report/summary.hpp"
#include "report/trace_writer.hpp"
#include "workload/experiment.hpp"

namespace cs::api {

struct RunOptions {
    std::string schedule;                        // empty: the experiment's own
    std::optional<std::filesystem::path> trace;  // .json (Chrome JSON) or .pftrace (Perfetto)
    report::TraceOptions trace_options;          // --trace-ranks, --trace-links
    // Called once the replay is built, before it runs: lets callers register extra observers
    // (which must outlive run()) with access to Replay::workers().
    std::function<void(replay::Replay&)> attach;
    // Called with the prepared iteration (replay::prepare) before the replay is built: what a
    // progress display counts to (PreparedIteration::passes()).
    std::function<void(const replay::PreparedIteration&)> on_prepared;
    // Record what the HTML report shows beyond the summary (RunResult::detail): replica 0's
    // timeline, link utilisation over time, memory per stage and over time.
    bool detail = false;
    // The memory the run may take (--max-memory): estimate_run_bytes above it is refused before
    // anything is built.
    std::int64_t max_memory = topology::kDefaultMaxMemory;
    // Called with a warning as soon as it is known (a trace of many GB), before the run; the
    // warning is in RunResult::warnings as well.
    std::function<void(const std::string&)> warn_now;
    // A run made only for the iteration time another run is measured against (the clean runs of
    // `variability` and `faults`): it makes no clean runs of its own.
    bool baseline = false;
    // Member and replica folding (replay::Replay::set_fold; --no-fold turns it off): exact where
    // it applies, so only for checking and timing.
    bool fold = true;
    // Every fast path (docs/architecture.md, "One seam for speed": folding, the network's
    // accelerator and kept state, the replay's scratch); false (--no-fast-paths) turns them all
    // off, with the same summary and trace but for `events` and `fold`, which say how it ran.
    bool fast_paths = true;
    // Ends the run at this simulated time if its iteration is still going then
    // (replay::Replay::stop_at): RunResult::stopped is set and the summary left empty. For a
    // caller that needs the figures only of an iteration that ends by then (plan's
    // confirmations: a layout slower than the k-th best confirmed cannot enter the top k). Not
    // with a trace or `detail` (refused: they would be left unfinished); the clean runs of
    // `variability` and `faults` still run whole before it.
    std::optional<Time> stop_at;
    // Ends the run, as stop_at does, at the first check (every stop_check_every of simulated
    // time) at which its iteration is still going and stop_when(now) holds (replay::Replay::
    // stop_when), for a caller whose limit improves while the run goes on. stop_when must be
    // monotone in time and, to keep results exact, hold only where the caller would discard the
    // run's figures anyway (plan: its score above a k-th best that only improves). Not with a
    // trace or `detail`, as stop_at.
    std::function<bool(Time)> stop_when;
    Time stop_check_every;
};

struct RunResult {
    report::Summary summary;
    // Non-fatal notes about this run (a vpp the schedule ignores, stages above HBM), in the order
    // found. The experiment's own load warnings stay in ExperimentSpec::warnings.
    std::vector<std::string> warnings;
    std::optional<report::RunDetail> detail;  // with RunOptions::detail
    // The flow solver's work in this run (benchmarks: bench_replay); zeros outside `flow`.
    network::Network::SolverStats solver;
    // RunOptions::stop_at ended the run before its iteration ended (the iteration takes at
    // least that long); the summary is empty.
    bool stopped = false;
};

// An upper estimate of the memory a run of `spec` takes, its cluster included, from per-GPU and
// per-pass costs measured on the Release build (docs/limits.md); `chunks` is the schedule's
// model chunks per device; `detail`: the HTML report's detail is recorded (RunOptions::detail). A
// double, so that absurd layouts cannot wrap. Each distinct time at which links fail later in the
// run adds a copy of the cluster's routing (Cluster::with_faults).
double estimate_run_bytes(const workload::ExperimentSpec& spec, int chunks, bool detail = false);
// What an all-to-all of `ranks` GPUs holds while it runs: ranks (ranks - 1) flows at once,
// about 200 bytes each (measured: ep 512, 60 MB; ep 1,024, 206 MB), rounded up to 256. Counted
// by estimate_run_bytes for expert parallelism and by `collective --op all_to_all`.
double all_to_all_bytes(double ranks);
// Why an MFU above 100% is no real run, for the warnings of `run` and `sweep`: times given for
// another shape, as a profile's layer times charged at any layout.
std::string above_peak_reason();
// Refuses (ConfigError at the layout) a run of `spec` in `shape` whose estimate_run_bytes is above
// `max_memory` (--max-memory), saying what it would need.
void check_run_memory(const workload::ExperimentSpec& spec, const schedule::PipelineShape& shape,
                      std::int64_t max_memory, bool detail = false);

// The input error for a route the topology lacks (no link fault involved): `where` names the
// input, `between` what sends data between the two GPUs ("this run", "a job"). Topologies of up
// to 4,096 GPUs are checked for it when built; larger ones meet it at the first route.
ConfigError unreachable_gpu_error(const NoPathError& e, const SourceLocation& where,
                                  const std::string& between);

class SweepCache;

// Throws ConfigError for experiments that cannot run under the schedule (bad shape, layers that
// do not split), SimulationError for internal failures. `cache`: what a sweep keeps across its
// runs (session/sweep_cache.hpp), used unless options.fast_paths is off; results do not depend
// on it.
RunResult run(const workload::ExperimentSpec& spec, const RunOptions& options = {},
              SweepCache* cache = nullptr);

}  // namespace cs::api
