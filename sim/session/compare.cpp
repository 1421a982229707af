#include "session/compare.hpp"

#include <algorithm>
#include <memory>
#include <sstream>

#include "config/document.hpp"
#include "core/errors.hpp"
#include "schedule/schedule.hpp"

namespace cs::api {

std::vector<std::string> parse_schedule_list(const std::string& text, const std::string& option) {
    const SourceLocation where{option + " " + text};
    std::vector<std::string> names;
    std::stringstream ss(text);
    for (std::string n; std::getline(ss, n, ',');) {
        n.erase(0, n.find_first_not_of(' '));
        n.erase(n.find_last_not_of(' ') + 1);
        if (n.empty()) continue;
        schedule::require_schedule(n, where);
        if (std::find(names.begin(), names.end(), n) != names.end())
            throw ConfigError(where, "schedule \"" + n + "\" is named twice");
        names.push_back(n);
    }
    if (names.empty())
        throw ConfigError(where, "name at least one schedule, e.g. gpipe,1f1b,interleaved");
    return names;
}

CompareResult compare(const workload::ExperimentSpec& spec, const CompareOptions& options) {
    if (options.schedules.empty())
        throw ConfigError(SourceLocation{"--schedules"},
                          "name at least one schedule, e.g. gpipe,1f1b,interleaved");
    CompareResult out;
    for (std::size_t i = 0; i < options.schedules.size(); ++i) {
        const auto& n = options.schedules[i];
        auto sched = schedule::make_schedule(n);
        if (sched && spec.layout.vpp > 1 && sched->chunks_for(spec.layout.vpp) == 1)
            out.without_virtual_stages.push_back(n);
        RunOptions opt;
        opt.schedule = n;
        opt.detail = options.details;
        opt.fast_paths = options.fast_paths;
        // Each schedule's report detail is kept until the report is written: the schedules
        // share the limit.
        opt.max_memory = options.details ? options.max_memory /
                                               static_cast<std::int64_t>(options.schedules.size())
                                         : options.max_memory;
        std::unique_ptr<report::TimelineRecorder> recorder;
        if (options.on_prepared)
            opt.on_prepared = [&options, i](const replay::PreparedIteration& it) {
                options.on_prepared(i, it);
            };
        opt.attach = [&options, &recorder, i](replay::Replay& replay) {
            if (options.timelines) {
                recorder = std::make_unique<report::TimelineRecorder>(replay);
                replay.add_observer(*recorder);
            }
            if (options.attach) options.attach(i, replay);
        };
        RunResult r = run(spec, opt);
        for (auto& w : r.warnings)
            if (std::find(out.warnings.begin(), out.warnings.end(), w) == out.warnings.end())
                out.warnings.push_back(std::move(w));
        out.summaries.push_back(std::move(r.summary));
        if (r.detail) out.details.push_back(std::move(*r.detail));
        if (recorder) {
            const auto& s = out.summaries.back();
            report::TimelinePanel panel;
            panel.schedule = s.schedule;
            panel.rows = recorder->rows();
            panel.chunks = s.vpp;
            panel.iteration_time = recorder->end();
            panel.bubble_fraction = s.bubble_fraction;
            panel.blocks = recorder->blocks();
            out.timelines.push_back(std::move(panel));
        }
    }
    return out;
}

}  // namespace cs::api
