#include "api/compare.hpp"

#include <algorithm>
#include <memory>
#include <sstream>

#include "api/text.hpp"
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
    for (const auto& n : options.schedules) {
        auto sched = schedule::make_schedule(n);
        if (sched && spec.layout.vpp > 1 && sched->chunks_for(spec.layout.vpp) == 1)
            out.without_virtual_stages.push_back(n);
        RunOptions opt;
        opt.schedule = n;
        opt.detail = options.details;
        std::unique_ptr<report::TimelineRecorder> recorder;
        if (options.timelines)
            opt.attach = [&recorder](replay::Replay& replay) {
                recorder = std::make_unique<report::TimelineRecorder>(replay);
                replay.add_observer(*recorder);
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

void print_compare_table(std::ostream& out, const std::vector<report::Summary>& results) {
    out << pad("schedule", 13) << pad("iteration", 13) << pad("bubble", 9)
        << pad("exposed comm", 14);
    for (const auto& kind : workload::kCommKindNames)
        out << pad(exposed_column(kind.name), 10);
    out << pad("host", 9) << pad("MFU", 9) << pad("peak act", 12) << "p2p bytes\n";
    for (const auto& r : results) {
        std::int64_t peak = 0;
        for (const auto& st : r.stages)
            peak = std::max(peak, st.peak_activation_bytes);
        out << pad(r.schedule, 13)
            << pad(format_time(Time::from_seconds_ceil(r.iteration_time_s)), 13)
            << pad(percent(r.bubble_fraction), 9) << pad(percent(r.exposed_comm_fraction), 14);
        for (double f : r.exposed_by_kind)
            out << pad(percent(f), 10);
        out << pad(percent(r.host_fraction), 9) << pad(percent(r.mfu), 9)
            << pad(format_bytes(Bytes{peak}), 12)
            << format_bytes(Bytes{static_cast<std::int64_t>(r.p2p_bytes)}) << "\n";
    }

    // Where the host shows (more than 1% of GPU time), say how: passes whose kernels issue slower
    // than they run, or the host's per-pass cost exposed where a stage waits for its input.
    bool host_note = false;
    for (const auto& r : results) {
        if (r.host_fraction <= 0.01) continue;
        if (!host_note) out << "\n";
        host_note = true;
        out << r.schedule << ": " << percent(r.host_fraction)
            << " of GPU time waits for the host: ";
        if (r.host_bound_passes > 0)
            out << r.host_bound_passes
                << " passes are host-bound (their kernels issue slower than they run)";
        else
            out << "no pass is host-bound; the host's cost per pass (framework work, the first "
                   "launch, p2p, synchronisation) shows where the GPU waits for it, after a "
                   "receive or a synchronisation";
        out << "\n";
    }

    // Per stage: activation memory and, in parentheses, the chunk activations it holds at once.
    // Long pipelines show their first four and last stages.
    out << "\npeak activation memory per stage (chunk activations in flight)\n";
    for (const auto& r : results) {
        out << pad(r.schedule, 13);
        const std::size_t n = r.stages.size();
        for (std::size_t i = 0; i < n; ++i) {
            if (n > 6 && i == 4) {
                out << " ...";
                i = n - 1;
            }
            const auto& st = r.stages[i];
            out << (i == 0 ? "" : "  ") << "s" << st.stage << " "
                << format_bytes(Bytes{st.peak_activation_bytes}) << " ("
                << st.peak_inflight_microbatches << ")";
        }
        out << "\n";
    }
}

}  // namespace cs::api
