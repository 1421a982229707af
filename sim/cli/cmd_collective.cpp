// clustersim collective --topology T.yaml [--set k=v]... --op all_reduce --ranks 0-7
//                       --sizes 1KiB:1GiB [--step-factor 2] [--algo ring] [--json FILE]
// The rows come from api::run_collective (sim/api/collective.hpp).
#include <array>
#include <filesystem>
#include <iostream>
#include <memory>

#include "api/collective.hpp"
#include "api/inputs.hpp"
#include "cli/commands.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "core/quantity.hpp"

namespace cs::cli {

namespace {

struct CollectiveArgs {
    std::string topology;
    std::vector<std::string> sets;
    std::string op = "all_reduce";
    std::string ranks;
    std::string sizes = "1KiB:1GiB";
    double step_factor = 2;
    std::string algo = "auto";
    std::string model = "flow";
    bool nominal = false;
    std::string host_overhead = "0us";
    std::string json;
    std::string max_memory;
};

std::string join(const std::vector<std::string>& names, const char* separator) {
    std::string out;
    for (const auto& n : names)
        out += (out.empty() ? "" : separator) + n;
    return out;
}

template <class E, std::size_t N>
E pick(const std::string& option, const std::string& value, const std::array<Named<E>, N>& table) {
    if (auto e = find_named(table, value)) return *e;
    throw ConfigError(SourceLocation{option + " " + value},
                      "unknown value; expected " + config::join_alternatives(names_of(table)));
}

void run(const CollectiveArgs& a) {
    using namespace network;
    api::CollectiveRequest request;
    request.topology = a.topology;
    request.max_memory = api::parse_max_memory(a.max_memory);
    request.sets = a.sets;
    request.kind = pick("--op", a.op, kCollectiveNames);
    request.algorithm = parse_algorithm(a.algo, SourceLocation{"--algo " + a.algo});
    request.fidelity = pick("--network", a.model, kFidelityNames);
    const auto host = parse_time(a.host_overhead);
    if (!host)
        throw ConfigError(SourceLocation{"--host-overhead " + a.host_overhead},
                          std::string("expected a time in ") + kTimeUnits);
    request.host_overhead = *host;
    request.nominal = a.nominal;
    request.sizes = api::parse_size_range(a.sizes, a.step_factor);
    request.ranks_text = a.ranks;
    if (!a.ranks.empty()) request.ranks = api::parse_rank_list(a.ranks, "--ranks");
    OutputSet outputs;
    outputs.declare("--json", a.json);
    const auto report = api::run_collective(request);
    api::print_collective(std::cout, request, report);
    if (!a.json.empty())
        write_file_atomically(
            a.json, [&](std::ostream& out) { out << api::collective_json(report).dump(2) << "\n"; },
            &outputs);
    outputs.commit();
}

}  // namespace

void register_collective(CLI::App& app) {
    auto args = std::make_shared<CollectiveArgs>();
    auto* cmd = app.add_subcommand(
        "collective", "Simulate a collective over a range of sizes (nccl-tests style table)");
    cmd->add_option("--topology", args->topology, "Topology YAML")->required();
    cmd->add_option("--set", args->sets, "Override a key of the topology: nodes=4")
        ->type_name("KEY=VALUE");
    cmd->add_option("--op", args->op, join(names_of(network::kCollectiveNames), " | "))
        ->capture_default_str();
    cmd->add_option("--ranks", args->ranks, "GPU numbers: 0-7, 0,2,4, 0-3,8-11 (default: all)");
    cmd->add_option("--sizes", args->sizes, "SIZE or FIRST:LAST, e.g. 1KiB:1GiB")
        ->capture_default_str();
    cmd->add_option("--step-factor", args->step_factor, "Size multiplier between rows")
        ->capture_default_str();
    cmd->add_option("--algo", args->algo,
                    join(network::AlgorithmRegistry::builtin().names(), " | "))
        ->capture_default_str();
    cmd->add_option("--network", args->model, join(names_of(network::kFidelityNames), " | "))
        ->capture_default_str();
    cmd->add_flag("--nominal", args->nominal,
                  "Use nominal link capacities and no step overhead instead of the calibration");
    cmd->add_option("--host-overhead", args->host_overhead,
                    "Host time added to every row, for comparing with measurements that include "
                    "a launch from Python (e.g. 50us); not part of the network model")
        ->capture_default_str();
    cmd->add_option("--json", args->json, "Write the rows as JSON");
    cmd->add_option("--max-memory", args->max_memory,
                    "The memory building the topology may take (default 16GiB)")
        ->type_name("SIZE");
    cmd->callback([args] { run(*args); });
}

}  // namespace cs::cli
