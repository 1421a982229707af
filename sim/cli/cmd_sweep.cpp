// clustersim sweep EXPERIMENT.yaml --vary KEY=V1,V2,... [--vary ...] [--set k=v]...
//                 [--top N] [--json FILE]
// The sweep itself is api::sweep (sim/api/sweep.hpp), MPI sharding included.
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "api/report.hpp"
#include "api/sweep.hpp"
#include "cli/commands.hpp"
#include "cli/log.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"

namespace cs::cli {

namespace {

struct SweepArgs {
    std::string experiment;
    std::vector<std::string> vary;
    std::vector<std::string> sets;
    std::int64_t top = 20;
    std::string json;
    std::string html;
};

void run_sweep(const SweepArgs& a, const api::SweepRanks& ranks) {
    api::SweepOptions options;
    options.experiment = a.experiment;
    options.sets = a.sets;
    options.axes = api::parse_sweep_axes(a.vary);
    options.keep_summaries = !a.json.empty();
    if (a.top < 0)
        throw ConfigError(SourceLocation{"--top " + std::to_string(a.top)},
                          "expected a number of rows, 0 or more");
    OutputSet outputs;
    if (ranks.rank() == 0) {
        outputs.declare("--json", a.json);
        outputs.declare("--html", a.html);
    }
    std::optional<std::vector<api::SweepRow>> rows;
    {
        // Rank 0 shows its own share's progress (the other ranks' shares run alongside); the
        // line is erased before the table is printed.
        Progress progress(ranks.size() > 1 ? "sweep (rank 0's share)" : "sweep");
        if (ranks.rank() == 0 && progress.enabled())
            options.on_row = [&](std::size_t done, std::size_t total) {
                progress.update(done, total, "combinations");
            };
        rows = api::sweep(options, ranks);
    }
    if (!rows) return;  // rank 0 reports
    const auto ranking = api::rank_sweep(*rows, a.experiment);
    if (!a.json.empty())
        write_file_atomically(
            a.json,
            [&](std::ostream& out) {
                out << api::sweep_json(options.axes, *rows, ranking).dump(2) << "\n";
            },
            &outputs);
    if (!a.html.empty()) {
        report::HtmlReport page;
        page.title = "clustersim sweep";
        page.experiment = ranking.source;
        for (const auto& axis : options.axes)
            page.sweep_keys.push_back(axis.key);
        page.sweep_rows = api::sweep_json(options.axes, *rows, ranking);
        // Wall-clock times would make two reports of one sweep differ.
        for (auto& row : *page.sweep_rows)
            if (row.contains("summary")) row["summary"].erase("wall_time_s");
        api::write_html(a.html, page, &outputs);
    }
    outputs.commit();
    api::print_sweep(std::cout, options.axes, *rows, ranking, static_cast<std::size_t>(a.top));
}

void sweep(const SweepArgs& a) {
    const api::SweepRanks ranks;
    try {
        run_sweep(a, ranks);
    } catch (const ConfigError&) {
        // Bad input fails every rank alike before anything is exchanged, and errors found after
        // the gather are thrown by rank 0 alone: rank 0 reports for all.
        if (ranks.rank() == 0) throw;
    }
}

}  // namespace

void register_sweep(CLI::App& app) {
    auto args = std::make_shared<SweepArgs>();
    auto* cmd = app.add_subcommand(
        "sweep", "Simulate every combination of some experiment keys and rank them by throughput");
    cmd->add_option("experiment", args->experiment, "Experiment YAML")->required();
    cmd->add_option("--vary", args->vary, "A key and its values: parallelism.tp=1,2,4,8")
        ->type_name("KEY=V1,V2,...")
        ->required();
    cmd->add_option("--set", args->sets, "Override a key in every combination (see run)")
        ->type_name("KEY=VALUE");
    cmd->add_option("--top", args->top, "Rows of the ranking to print")->capture_default_str();
    cmd->add_option("--json", args->json,
                    "Write every combination (summary, or the reason it is not valid) as JSON");
    cmd->add_option("--html", args->html,
                    "Write a self-contained HTML report: the ranking, throughput against each key")
        ->type_name("FILE");
    cmd->callback([args] { sweep(*args); });
}

}  // namespace cs::cli
