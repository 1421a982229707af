// clustersim compare EXPERIMENT.yaml --schedules gpipe,1f1b,interleaved [--set k=v]...
//                   [--json FILE] [--svg FILE]
#include <cstdio>
#include <iostream>
#include <sstream>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/simulate.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"

namespace cs::cli {

namespace {
struct CompareArgs {
    std::string experiment;
    std::string schedules = "gpipe,1f1b,interleaved";
    std::vector<std::string> sets;
    std::string json;
    std::string svg;
};

void compare(const CompareArgs& a) {
    auto spec = workload::load_experiment(a.experiment, a.sets);
    for (const auto& w : spec.warnings) spdlog::warn("{}", w);
    std::vector<std::string> names;
    std::stringstream ss(a.schedules);
    for (std::string n; std::getline(ss, n, ',');)
        if (!n.empty()) names.push_back(n);
    if (names.empty())
        throw ConfigError(SourceLocation{"--schedules " + a.schedules},
                          "name at least one schedule, e.g. gpipe,1f1b,interleaved");
    std::vector<report::Summary> results;
    for (const auto& n : names) {
        SimulateOptions opt;
        opt.schedule = n;
        results.push_back(simulate(spec, opt));
    }
    if (!a.json.empty())
        write_file_atomically(a.json, [&](std::ostream& out) {
            auto list = nlohmann::ordered_json::array();
            for (const auto& r : results) list.push_back(report::to_json(r));
            out << list.dump(2) << "\n";
        });
    std::cout << "experiment " << spec.source << "\n\n"
              << "schedule      iteration    bubble   exposed comm  MFU      peak act/GPU  "
                 "p2p bytes\n";
    for (const auto& r : results) {
        std::int64_t peak = 0;
        for (const auto& st : r.stages) peak = std::max(peak, st.peak_activation_bytes);
        char line[256];
        std::snprintf(line, sizeof line, "%-13s %-12s %-8.2f%% %-12.2f%% %-7.2f%% %-13s %s\n",
                      r.schedule.c_str(),
                      format_time(Time::from_seconds_ceil(r.iteration_time_s)).c_str(),
                      r.bubble_fraction * 100, r.exposed_comm_fraction * 100, r.mfu * 100,
                      format_bytes(Bytes{peak}).c_str(),
                      format_bytes(Bytes{static_cast<std::int64_t>(r.p2p_bytes)}).c_str());
        std::string l(line);
        std::cout << l;
    }
}
}  // namespace

void register_compare(CLI::App& app) {
    auto args = std::make_shared<CompareArgs>();
    auto* cmd = app.add_subcommand("compare", "Simulate several schedules on one experiment");
    cmd->add_option("experiment", args->experiment, "Experiment YAML")->required();
    cmd->add_option("--schedules", args->schedules, "Comma-separated schedule names")
        ->capture_default_str();
    cmd->add_option("--set", args->sets, "Override a key (see run)")->type_name("KEY=VALUE");
    cmd->add_option("--json", args->json, "Write the list of summaries as JSON");
    cmd->add_option("--svg", args->svg, "Draw the schedules' timelines as SVG");
    cmd->callback([args] { compare(*args); });
}

}  // namespace cs::cli
