// clustersim run [EXPERIMENT.yaml] [--set key=value]... [--json FILE] [--trace FILE]
#include <spdlog/spdlog.h>
#include <iostream>
#include <memory>

#include "api/inputs.hpp"
#include "api/run.hpp"
#include "cli/commands.hpp"
#include "core/atomic_file.hpp"

namespace cs::cli {

namespace {
struct RunArgs {
    std::string experiment;
    std::vector<std::string> sets;
    std::string megatron_args;
    std::string json;
    std::string trace;
    std::string trace_ranks;
    std::string trace_links = "auto";
    std::string schedule;
};

void run(const RunArgs& a) {
    OutputSet outputs;
    outputs.declare("--json", a.json);
    outputs.declare("--trace", a.trace);
    const auto spec = api::load_experiment({a.experiment, a.sets, a.megatron_args});
    for (const auto& w : spec.warnings)
        spdlog::warn("{}", w);
    api::RunOptions opt;
    opt.schedule = a.schedule;
    if (!a.trace.empty()) opt.trace = a.trace;
    if (!a.trace_ranks.empty())
        opt.trace_options.ranks = api::parse_rank_list(a.trace_ranks, "--trace-ranks");
    opt.trace_options.links = *report::trace_links_from_name(a.trace_links);
    opt.trace_options.outputs = &outputs;
    const auto result = api::run(spec, opt);
    for (const auto& w : result.warnings)
        spdlog::warn("{}", w);
    if (!a.json.empty())
        write_file_atomically(a.json, [&](std::ostream& out) {
            out << report::to_json(result.summary).dump(2) << "\n";
        }, &outputs);
    outputs.commit();
    std::cout << "experiment            " << spec.source << "\n";
    report::print_summary(std::cout, result.summary);
    if (!a.trace.empty())
        std::cout << "\ntrace written to " << a.trace << " (open it in ui.perfetto.dev)\n";
}
}  // namespace

void register_run(CLI::App& app) {
    auto args = std::make_shared<RunArgs>();
    auto* cmd = app.add_subcommand("run", "Simulate one training iteration of an experiment");
    cmd->add_option("experiment", args->experiment,
                    "Experiment YAML (default: the bundled workloads/default.yaml)");
    cmd->add_option("--set", args->sets, "Override a key: parallelism.tp=4, topology.nodes=8")
        ->type_name("KEY=VALUE");
    cmd->add_option("--megatron-args", args->megatron_args,
                    "Megatron-LM flags (or @FILE) that set the model, layout and training keys")
        ->type_name("\"--tensor-model-parallel-size 8 ...\"");
    cmd->add_option("--schedule", args->schedule, "Override the experiment's schedule");
    cmd->add_option("--json", args->json, "Write the summary as JSON");
    cmd->add_option(
        "--trace", args->trace,
        "Write a timeline: FILE.json (Chrome JSON) or FILE.pftrace (Perfetto protobuf)");
    cmd->add_option("--trace-ranks", args->trace_ranks, "Trace only these GPUs: 0-63, 0,8,16")
        ->type_name("RANKS");
    cmd->add_option("--trace-links", args->trace_links,
                    "Link utilisation counters: auto (all on one node, else inter-node), "
                    "inter-node, all, none")
        ->check(CLI::IsMember({"auto", "inter-node", "all", "none"}));
    cmd->callback([args] { run(*args); });
}

}  // namespace cs::cli
