// clustersim compare EXPERIMENT.yaml --schedules gpipe,1f1b,interleaved [--set k=v]...
//                   [--json FILE] [--svg FILE]
#include <spdlog/spdlog.h>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/tables.hpp"
#include "cli/text.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "schedule/schedule.hpp"
#include "session/compare.hpp"
#include "session/report.hpp"

namespace cs::cli {

namespace {
struct CompareArgs {
    std::string experiment;
    std::string schedules = "gpipe,1f1b,interleaved";
    std::vector<std::string> sets;
    std::string json;
    std::string svg;
    std::string html;
    std::string max_memory;
    bool no_fast_paths = false;
};

void compare(const CompareArgs& a) {
    OutputSet outputs;
    outputs.declare("--json", a.json);
    outputs.declare("--svg", a.svg);
    outputs.declare("--html", a.html);
    api::CompareOptions options;
    options.schedules = api::parse_schedule_list(a.schedules);
    options.timelines = !a.svg.empty();
    options.details = !a.html.empty();
    options.fast_paths = !a.no_fast_paths;
    options.max_memory = api::parse_max_memory(a.max_memory);
    auto spec = api::load_experiment({a.experiment, a.sets, "", options.max_memory});
    api::guard_experiment_inputs(outputs, spec);
    // Every schedule run comes from --schedules: messages about one name the option, not the
    // file's `schedule:` line.
    spec.schedule_where = SourceLocation{"--schedules " + a.schedules};
    for (const auto& w : spec.warnings)
        spdlog::warn("{}", w);
    const auto result = api::compare(spec, options);
    for (const auto& w : result.warnings)
        // The table's note line names the schedules that ignore vpp, once for all of them.
        if (result.without_virtual_stages.empty() ||
            w.find(" has no virtual stages: vpp = ") == std::string::npos)
            spdlog::warn("{}", w);

    if (!a.json.empty())
        write_file_atomically(
            a.json,
            [&](std::ostream& out) {
                auto list = nlohmann::ordered_json::array();
                for (const auto& r : result.summaries)
                    list.push_back(report::to_json(r));
                out << json_text(list);
            },
            &outputs);
    if (!a.svg.empty())
        write_file_atomically(
            a.svg, [&](std::ostream& out) { report::write_svg_timelines(out, result.timelines); },
            &outputs);
    if (!a.html.empty()) {
        report::HtmlReport page;
        page.title = "clustersim compare";
        page.experiment = spec.source;
        page.runs = result.summaries;
        page.details = result.details;
        page.warnings = spec.warnings;
        page.warnings.insert(page.warnings.end(), result.warnings.begin(), result.warnings.end());
        page.validation = api::validation_confidence(spec);
        api::write_html(a.html, page, &outputs);
    }
    outputs.commit();

    const auto& first = result.summaries.front();
    std::cout << "experiment " << spec.source << "\n"
              << "pp=" << first.pp << " tp=" << first.tp << " dp=" << first.dp
              << " microbatches=" << first.microbatches << " vpp=" << spec.layout.vpp << "\n";
    if (!result.without_virtual_stages.empty()) {
        std::string list;
        for (const auto& n : result.without_virtual_stages)
            list += (list.empty() ? "" : ", ") + n;
        std::cout << "note: vpp=" << spec.layout.vpp
                  << " is ignored by schedules without virtual stages (" << list
                  << "): they run one model chunk per stage\n";
    }
    std::cout << "\n";
    print_compare_table(std::cout, result.summaries);
    if (!a.svg.empty()) std::cout << "\ntimelines drawn to " << a.svg << "\n";
    if (!a.html.empty()) std::cout << "\nreport written to " << a.html << "\n";
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
    cmd->add_option("--html", args->html,
                    "Write a self-contained HTML report comparing the schedules")
        ->type_name("FILE");
    cmd->add_option("--max-memory", args->max_memory,
                    "The memory the runs may take (default 16GiB, as run; with --html shared by "
                    "the schedules, whose report detail is kept); larger runs are refused "
                    "before they start")
        ->type_name("SIZE");
    cmd->add_flag("--no-fast-paths", args->no_fast_paths,
                  "Turn off every fast path (folding, kept plans and capacities, batched sends "
                  "and link sums, caches across runs): the same results, computed the plain "
                  "way (for checking)");
    cmd->callback([args] { compare(*args); });
}

}  // namespace cs::cli
