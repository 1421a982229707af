// clustersim chakra export [EXPERIMENT.yaml] --out DIR [--set key=value]... [--schedule S]
//                          [--prefix P] [--host]
// clustersim chakra run DIR (--topology T.yaml | --experiment E.yaml) [--set key=value]...
//                       [--network MODEL] [--rank-map RANKS] [--json FILE] [--trace FILE]
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/text.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "report/trace_sink.hpp"
#include "schedule/schedule.hpp"
#include "session/chakra.hpp"

namespace cs::cli {

namespace {

struct ExportArgs {
    std::string experiment;
    std::vector<std::string> sets;
    std::string megatron_args;
    std::string schedule;
    std::string out;
    std::string prefix = "clustersim";
    bool host = false;
    std::string max_memory;
};

struct ChakraRunArgs {
    std::string folder;
    std::string experiment;
    std::string topology;
    std::vector<std::string> sets;
    std::string network;
    std::string rank_map;
    std::string dims;
    std::string json;
    std::string trace;
    std::string max_memory;
};

void run_export(const ExportArgs& a) {
    const std::int64_t max_memory = api::parse_max_memory(a.max_memory);
    auto spec = api::load_experiment({a.experiment, a.sets, a.megatron_args, max_memory});
    if (!a.schedule.empty()) {
        // Messages about the schedule name the option, not the file's `schedule:` line.
        spec.schedule = a.schedule;
        spec.schedule_where = SourceLocation{"--schedule " + a.schedule};
    }
    for (const auto& w : spec.warnings)
        spdlog::warn("{}", w);
    OutputSet outputs;
    api::guard_experiment_inputs(outputs, spec, a.megatron_args);
    const auto result =
        api::chakra_export(spec, a.schedule, a.out, a.prefix, outputs, a.host, max_memory);
    outputs.commit();
    for (const auto& w : result.warnings)
        spdlog::warn("{}", w);
    std::cout << "experiment  " << spec.source << "\n"
              << "schedule    " << (a.schedule.empty() ? spec.schedule : a.schedule) << "\n"
              << "wrote       " << result.ranks << " Chakra ETs (" << result.nodes << " nodes) and "
              << chakra::kCommGroupsFile << " to " << a.out << "\n";
}

void run_chakra(const ChakraRunArgs& a) {
    OutputSet outputs;
    outputs.declare("--json", a.json);
    outputs.declare("--trace", a.trace);
    outputs.guard_input("--topology", a.topology);
    outputs.guard_input("--experiment", a.experiment);
    // The folder's files are inputs too: its ETs and communicator groups.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(a.folder, ec))
        outputs.guard_input("the Chakra folder's file", entry.path());
    api::ChakraRunRequest request;
    request.folder = a.folder;
    request.experiment = a.experiment;
    request.topology = a.topology;
    request.sets = a.sets;
    if (!a.network.empty()) {
        auto f = find_named(network::kFidelityNames, a.network);
        if (!f)
            throw ConfigError(SourceLocation{"--network " + a.network},
                              "unknown value; expected " +
                                  config::join_alternatives(names_of(network::kFidelityNames)));
        request.network = *f;
    }
    request.rank_map = a.rank_map;
    request.dims = a.dims;
    if (!a.trace.empty()) {
        report::trace_format_for(a.trace);
        request.trace = a.trace;
    }
    request.outputs = &outputs;
    request.max_memory = api::parse_max_memory(a.max_memory);
    const auto r = api::chakra_run(request);
    for (const auto& w : r.warnings)
        spdlog::warn("{}", w);
    if (!a.json.empty())
        write_file_atomically(
            a.json, [&](std::ostream& o) { o << json_text(r.summary); }, &outputs);
    outputs.commit();
    const auto& res = r.result;
    char line[160];
    std::cout << "chakra ETs            " << a.folder << " (" << r.program.ranks.size()
              << " ranks, " << r.program.nodes << " nodes)\n"
              << "topology              " << r.cluster_source << " ("
              << r.summary["network"].get<std::string>() << " network)\n";
    // As `run` prints it (format_time); the picoseconds are in --json's iteration_time_ps.
    std::cout << "iteration time        " << format_time(res.iteration_time) << "\n";
    double busy = 0;
    for (const auto& s : res.ranks)
        busy += s.compute_busy.seconds();
    const double T = res.iteration_time.seconds();
    std::snprintf(line, sizeof line, "compute busy          %.1f%% (mean over ranks)\n",
                  T > 0 && !res.ranks.empty() ? 100.0 * busy / (T * res.ranks.size()) : 0.0);
    std::cout << line;
    if (!res.links.empty()) {
        std::cout << "\nbusiest links (" << res.links.size() << " carried traffic)\n";
        for (std::size_t i = 0; i < res.links.size() && i < 5; ++i) {
            const auto& l = res.links[i];
            std::snprintf(line, sizeof line, "  %-40s %-11s %6.1f%%  %s\n", l.name.c_str(),
                          l.kind.c_str(), 100 * l.utilization,
                          format_bytes(Bytes{static_cast<std::int64_t>(l.bytes)}).c_str());
            std::cout << line;
        }
    }
    if (!a.trace.empty())
        std::cout << "\ntrace written to " << a.trace << " (open it in ui.perfetto.dev)\n";
}

}  // namespace

void register_chakra(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "chakra", "Chakra execution traces: export an experiment, run a folder of ETs");
    cmd->require_subcommand(1);

    auto ex = std::make_shared<ExportArgs>();
    auto* e = cmd->add_subcommand(
        "export", "Write an experiment's per-rank programs as Chakra ETs (<prefix>.<rank>.et)");
    e->add_option("experiment", ex->experiment,
                  "Experiment YAML (default: the bundled workloads/default.yaml)");
    e->add_option("--out", ex->out, "Folder for the ET files and comm_groups.json")
        ->required()
        ->type_name("DIR");
    e->add_option("--set", ex->sets, "Override a key: parallelism.tp=4, topology.nodes=8")
        ->type_name("KEY=VALUE");
    e->add_option("--megatron-args", ex->megatron_args,
                  "Megatron-LM flags (or @FILE) that set the model, layout and training keys");
    e->add_option("--schedule", ex->schedule,
                  "Override the experiment's schedule: " +
                      config::join_alternatives(schedule::schedule_names()));
    e->add_option("--prefix", ex->prefix, "File name prefix (default clustersim)");
    e->add_flag("--host", ex->host,
                "Also export the host model (compute.host) as CPU nodes and cs_delay waits, for "
                "an exact round trip (ASTRA-sim runs the waits as compute)");
    e->add_option("--max-memory", ex->max_memory,
                  "Memory the export may take (default 16GiB): it holds every rank's ET");
    e->callback([ex] { run_export(*ex); });

    auto rn = std::make_shared<ChakraRunArgs>();
    auto* r = cmd->add_subcommand("run", "Run a folder of Chakra ETs on a topology");
    r->add_option("folder", rn->folder, "Folder of <prefix>.<rank>.et files (and comm_groups.json)")
        ->required();
    r->add_option("--topology", rn->topology, "Topology YAML (the network: calibrated flow)");
    r->add_option("--experiment", rn->experiment,
                  "Take the topology and network of this experiment YAML instead");
    r->add_option("--set", rn->sets, "Override a key of the file given: nodes=8")
        ->type_name("KEY=VALUE");
    r->add_option("--network", rn->network,
                  "Network model: " + config::join_alternatives(names_of(network::kFidelityNames)));
    r->add_option("--rank-map", rn->rank_map, "GPU of each rank, rank order: 8-15,0-7")
        ->type_name("RANKS");
    r->add_option("--dims", rn->dims,
                  "ASTRA-sim's network dimensions (npus_count) that involved_dim names, dimension "
                  "0 first: 8,4 (default: the topology's GPUs per node, then nodes)")
        ->type_name("N,N,...");
    r->add_option("--json", rn->json, "Write the summary as JSON");
    r->add_option("--trace", rn->trace,
                  "Write a timeline: " + report::TraceFormatRegistry::builtin().help());
    r->add_option("--max-memory", rn->max_memory,
                  "Memory the ETs may take once read (default 16GiB): larger ones are refused");
    r->callback([rn] { run_chakra(*rn); });
}

}  // namespace cs::cli
