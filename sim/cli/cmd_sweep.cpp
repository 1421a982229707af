// clustersim sweep EXPERIMENT.yaml --vary KEY=V1,V2,... [--vary ...] [--set k=v]...
//                 [--top N] [--json FILE]
// The sweep itself is api::sweep (sim/session/sweep.hpp), MPI sharding included.
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/log.hpp"
#include "cli/tables.hpp"
#include "cli/text.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "session/report.hpp"
#include "session/sweep.hpp"

namespace cs::cli {

namespace {

struct SweepArgs {
    std::string experiment;
    std::vector<std::string> vary;
    std::vector<std::string> sets;
    std::int64_t top = 20;
    std::string json;
    std::string html;
    std::string max_memory;
    bool no_fast_paths = false;
};

// Refuses an output that is the experiment or its topology file before anything runs. The sweep
// loads the experiment itself (and reports its errors); here only its `topology:` path is looked
// up. The other files a combination reads are checked as it is loaded (SweepOptions::on_loaded).
void guard_sweep_inputs(const OutputSet& outputs, const std::string& experiment) {
    const std::filesystem::path path =
        experiment.empty() ? api::default_experiment() : std::filesystem::path(experiment);
    outputs.guard_input("the experiment", path);
    std::filesystem::path topology;
    try {
        const auto doc = config::load_document(path);
        const YAML::Node& root = doc.root;
        const YAML::Node node = root["topology"];
        if (node.IsScalar()) topology = doc.resolve(node.Scalar());
    } catch (const ConfigError&) {
        // The sweep reports it, with its --set and --vary context.
    }
    outputs.guard_input("the topology", topology);
}

void run_sweep(const SweepArgs& a, const api::SweepRanks& ranks) {
    api::SweepOptions options;
    options.experiment = a.experiment;
    options.sets = a.sets;
    options.axes = api::parse_sweep_axes(a.vary);
    // Each combination's --vary values are applied after the --set ones: a key given to both
    // would have its --set value replaced in every combination without a word.
    for (const auto& set : a.sets) {
        const auto key = config::split_assignment(set).first;
        for (const auto& axis : options.axes)
            if (axis.key == key)
                throw ConfigError(SourceLocation{"--set " + set},
                                  "'" + key +
                                      "' is also varied by --vary; give it with --vary or "
                                      "--set, not both");
    }
    // Summaries are kept only for the file that lists every combination; the HTML page's table
    // and plots need every row's headline figures, which every row keeps.
    options.keep_summaries = !a.json.empty();
    options.fast_paths = !a.no_fast_paths;
    if (a.top < 0)
        throw ConfigError(SourceLocation{"--top " + std::to_string(a.top)},
                          "expected a number of rows, 0 or more");
    // Declared and guarded on every rank (rank 0 alone writes them): under mpirun a combination
    // that reads an output may be dealt to any rank, and the rank that loads it must refuse it.
    OutputSet outputs;
    outputs.declare("--json", a.json);
    outputs.declare("--html", a.html);
    guard_sweep_inputs(outputs, a.experiment);
    // Every combination's own inputs (its model and calibration files, which --vary may
    // change), as it is loaded: the outputs are written after the last one.
    options.on_loaded = [&outputs](const workload::ExperimentSpec& spec) {
        api::guard_experiment_inputs(outputs, spec);
    };
    const auto top = static_cast<std::size_t>(a.top);
    options.max_memory = api::parse_max_memory(a.max_memory);
    // Rank 0 shows its own share's progress (the other ranks' shares run alongside); the line is
    // erased before the table is printed.
    auto progress =
        std::make_unique<Progress>(ranks.size() > 1 ? "sweep (rank 0's share)" : "sweep");
    if (ranks.rank() == 0 && progress->enabled())
        options.on_row = [p = progress.get()](std::size_t done, std::size_t total) {
            p->update(done, total, "combinations");
        };
    if (!options.keep_summaries && a.html.empty()) {
        // The table alone: each process keeps only the rows that can still make the top.
        const auto tally = api::sweep_tally(options, ranks, top);
        progress.reset();
        if (tally) print_sweep(std::cout, options.axes, *tally, top);
        return;
    }
    const auto rows = api::sweep(options, ranks);
    progress.reset();
    if (!rows) return;  // rank 0 reports
    const auto ranking = api::rank_sweep(*rows, a.experiment);
    if (!a.json.empty())
        write_file_atomically(
            a.json,
            [&](std::ostream& out) {
                out << json_text(api::sweep_json(options.axes, *rows, ranking));
            },
            &outputs);
    if (!a.html.empty()) {
        report::HtmlReport page;
        page.title = "clustersim sweep";
        page.experiment = ranking.source;
        for (const auto& axis : options.axes)
            page.sweep_keys.push_back(axis.key);
        page.sweep_rows = api::sweep_json(options.axes, *rows, ranking);
        page.command = run_command(a.experiment, a.sets);
        // Wall-clock times would make two reports of one sweep differ. (Without --json a row's
        // summary is its headline figures: api::sweep_json.)
        for (auto& row : *page.sweep_rows)
            if (row.contains("summary")) row["summary"].erase("wall_time_s");
        api::write_html(a.html, page, &outputs);
    }
    outputs.commit();
    print_sweep(std::cout, options.axes, api::tally_rows(*rows, top), top);
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
    cmd->add_option("--max-memory", args->max_memory,
                    "Memory the sweep may take (default 16GiB): each combination's topology, and "
                    "with --json every combination's summary, are checked against it")
        ->type_name("SIZE");
    cmd->add_flag("--no-fast-paths", args->no_fast_paths,
                  "Turn off every fast path (folding, kept plans and capacities, batched sends "
                  "and link sums, caches across runs): the same results, computed the plain "
                  "way (for checking)");
    cmd->callback([args] { sweep(*args); });
}

}  // namespace cs::cli
