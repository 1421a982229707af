// One simulated iteration of an experiment under one schedule: the pipeline shared by `run`,
// `compare` and `validate`.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "report/summary.hpp"
#include "report/trace_writer.hpp"
#include "workload/experiment.hpp"

namespace cs::cli {

struct SimulateOptions {
    std::string schedule;                        // empty: the experiment's own
    std::optional<std::filesystem::path> trace;  // .json (Chrome JSON) or .pftrace (Perfetto)
    report::TraceOptions trace_options;          // --trace-ranks, --trace-links
    // Called now and then during long runs with the simulated time reached.
    std::function<void(Time)> progress;
    // Called once the replay is built, before it runs: lets callers register extra observers
    // (which must outlive simulate()) with access to Replay::workers().
    std::function<void(replay::Replay&)> attach;
};

// Throws ConfigError for experiments that cannot run under the schedule (bad shape, layers that
// do not split), SimulationError for internal failures.
report::Summary simulate(const workload::ExperimentSpec& spec, const SimulateOptions& options);

}  // namespace cs::cli
