// clustersim compare EXPERIMENT.yaml --schedules gpipe,1f1b,interleaved [--set k=v]...
//                   [--json FILE] [--svg FILE]
#include <spdlog/spdlog.h>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/simulate.hpp"
#include "cli/table.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "report/svg_timeline.hpp"
#include "schedule/schedule.hpp"

namespace cs::cli {

namespace {
struct CompareArgs {
    std::string experiment;
    std::string schedules = "gpipe,1f1b,interleaved";
    std::vector<std::string> sets;
    std::string json;
    std::string svg;
};

// Splits and checks the --schedules list before anything runs, so that a typo costs no
// simulation and leaves no output file.
std::vector<std::string> parse_schedules(const std::string& text) {
    const SourceLocation where{"--schedules " + text};
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

void print_table(std::ostream& out, const std::vector<report::Summary>& results) {
    out << pad("schedule", 13) << pad("iteration", 13) << pad("bubble", 9)
        << pad("exposed comm", 14) << pad("MFU", 9) << pad("peak act", 12) << "p2p bytes\n";
    for (const auto& r : results) {
        std::int64_t peak = 0;
        for (const auto& st : r.stages)
            peak = std::max(peak, st.peak_activation_bytes);
        out << pad(r.schedule, 13)
            << pad(format_time(Time::from_seconds_ceil(r.iteration_time_s)), 13)
            << pad(percent(r.bubble_fraction), 9) << pad(percent(r.exposed_comm_fraction), 14)
            << pad(percent(r.mfu), 9) << pad(format_bytes(Bytes{peak}), 12)
            << format_bytes(Bytes{static_cast<std::int64_t>(r.p2p_bytes)}) << "\n";
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

void compare(const CompareArgs& a) {
    const std::vector<std::string> names = parse_schedules(a.schedules);
    auto spec = workload::load_experiment(a.experiment, a.sets);
    for (const auto& w : spec.warnings)
        spdlog::warn("{}", w);

    std::vector<report::Summary> results;
    std::vector<report::TimelinePanel> panels;
    std::vector<std::string> without_virtual_stages;
    for (const auto& n : names) {
        if (spec.layout.vpp > 1 && schedule::make_schedule(n)->chunks_for(spec.layout.vpp) == 1)
            without_virtual_stages.push_back(n);
        SimulateOptions opt;
        opt.schedule = n;
        std::unique_ptr<report::TimelineRecorder> recorder;
        if (!a.svg.empty())
            opt.attach = [&recorder](replay::Replay& replay) {
                recorder = std::make_unique<report::TimelineRecorder>(replay);
                replay.add_observer(*recorder);
            };
        results.push_back(simulate(spec, opt));
        if (recorder) {
            const auto& r = results.back();
            report::TimelinePanel panel;
            panel.schedule = r.schedule;
            panel.rows = recorder->rows();
            panel.chunks = r.vpp;
            panel.iteration_time = recorder->end();
            panel.bubble_fraction = r.bubble_fraction;
            panel.blocks = recorder->blocks();
            panels.push_back(std::move(panel));
        }
    }

    if (!a.json.empty())
        write_file_atomically(a.json, [&](std::ostream& out) {
            auto list = nlohmann::ordered_json::array();
            for (const auto& r : results)
                list.push_back(report::to_json(r));
            out << list.dump(2) << "\n";
        });
    if (!a.svg.empty())
        write_file_atomically(a.svg,
                              [&](std::ostream& out) { report::write_svg_timelines(out, panels); });

    const auto& first = results.front();
    std::cout << "experiment " << spec.source << "\n"
              << "pp=" << first.pp << " tp=" << first.tp << " dp=" << first.dp
              << " microbatches=" << first.microbatches << " vpp=" << spec.layout.vpp << "\n";
    if (!without_virtual_stages.empty()) {
        std::string list;
        for (const auto& n : without_virtual_stages)
            list += (list.empty() ? "" : ", ") + n;
        std::cout << "note: vpp=" << spec.layout.vpp
                  << " is ignored by schedules without virtual stages (" << list
                  << "): they run one model chunk per stage\n";
    }
    std::cout << "\n";
    print_table(std::cout, results);
    if (!a.svg.empty()) std::cout << "\ntimelines drawn to " << a.svg << "\n";
}
}  // namespace

void register_compare(CLI::App& app) {
    auto args = std::make_shared<CompareArgs>();
    auto* cmd = app.add_subcommand("compare", "Simulate several schedules on one experiment");
    cmd->add_option("experiment", args->experiment, "Experiment YAML")->required();
    cmd->add_option("--schedules", args->schedules,
                    "Comma-separated schedule names: " +
                        config::join_alternatives(schedule::schedule_names()))
        ->capture_default_str();
    cmd->add_option("--set", args->sets, "Override a key (see run)")->type_name("KEY=VALUE");
    cmd->add_option("--json", args->json, "Write the list of summaries as JSON");
    cmd->add_option("--svg", args->svg,
                    "Draw the schedules' timelines (data-parallel replica 0) as SVG");
    cmd->callback([args] { compare(*args); });
}

}  // namespace cs::cli
