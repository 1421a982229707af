// Several schedules on one experiment, side by side.
#pragma once

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "report/svg_timeline.hpp"
#include "session/run.hpp"

namespace cs::api {

// Splits and checks a comma-separated schedule list ("gpipe,1f1b,interleaved") before anything
// runs, so that a typo costs no simulation. Throws ConfigError (unknown or repeated names, an
// empty list) located at `option text`.
std::vector<std::string> parse_schedule_list(const std::string& text,
                                             const std::string& option = "--schedules");

struct CompareOptions {
    std::vector<std::string> schedules;  // at least one, as parse_schedule_list gives them
    bool timelines = false;              // record data-parallel replica 0's passes per schedule
    bool details = false;                // RunOptions::detail per schedule
    bool fast_paths = true;              // RunOptions::fast_paths per schedule
    std::int64_t max_memory = topology::kDefaultMaxMemory;  // RunOptions::max_memory per schedule
    // RunOptions::on_prepared and ::attach of each schedule's run, with the schedule's index in
    // `schedules`: a progress display or another observer (which must outlive compare()).
    std::function<void(std::size_t, const replay::PreparedIteration&)> on_prepared;
    std::function<void(std::size_t, replay::Replay&)> attach;
};

struct CompareResult {
    std::vector<report::Summary> summaries;        // one per schedule, in the order given
    std::vector<report::TimelinePanel> timelines;  // one per schedule when asked for
    // Schedules that ran one chunk per stage although the experiment sets vpp > 1.
    std::vector<std::string> without_virtual_stages;
    std::vector<std::string> warnings;       // every run's warnings, in order, each once
    std::vector<report::RunDetail> details;  // one per schedule when asked for
};

CompareResult compare(const workload::ExperimentSpec& spec, const CompareOptions& options);

}  // namespace cs::api
