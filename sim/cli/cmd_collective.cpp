// clustersim collective --topology T.yaml [--set k=v]... --op all_reduce --ranks 0-7
//                       --sizes 1KiB:1GiB [--step-factor 2] [--algo ring] [--protocol ll]
//                       [--json FILE]
// The rows come from api::run_collective (sim/session/collective.hpp).
#include <array>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cli/tables.hpp"
#include "cli/text.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "core/quantity.hpp"
#include "ingest/inputs.hpp"
#include "session/collective.hpp"

namespace cs::cli {

namespace {

struct CollectiveArgs {
    std::string topology;
    std::vector<std::string> sets;
    std::string op = "all_reduce";
    std::string ranks;
    std::string sizes = "1KiB:1GiB";
    double step_factor = 2;
    // nccl-tests' flags; given_* say which the user wrote.
    std::string min_bytes, max_bytes, step_bytes = "1M";
    double nccl_factor = 1;
    std::string data_type = "float";
    std::string format = "table";
    CLI::Option *sizes_opt = nullptr, *step_factor_opt = nullptr, *min_opt = nullptr,
                *max_opt = nullptr, *nccl_factor_opt = nullptr, *step_bytes_opt = nullptr;
    std::string algo = "auto";
    std::string protocol = "auto";
    std::string model = "flow";
    bool nominal = false;
    std::string calibration;
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

// The sizes swept, and the step as nccl-tests' table heads it ("2(factor)", "1048576(bytes)").
struct SizeSweep {
    std::vector<Bytes> sizes;
    std::string step;
};

// --sizes and --step-factor, or nccl-tests' -b/-e/-f/-i (not both).
SizeSweep size_sweep(const CollectiveArgs& a) {
    const bool nccl_range = a.min_opt->count() > 0 || a.max_opt->count() > 0;
    const bool nccl_step = a.nccl_factor_opt->count() > 0 || a.step_bytes_opt->count() > 0;
    if (!nccl_range && !nccl_step) {
        auto sizes = api::parse_size_range(a.sizes, a.step_factor);
        char text[64];
        std::snprintf(text, sizeof text, "%g(factor)", a.step_factor);
        return {std::move(sizes), text};
    }
    if (a.sizes_opt->count() > 0 || a.step_factor_opt->count() > 0)
        throw ConfigError(SourceLocation{"--sizes"},
                          "give either --sizes [--step-factor] or nccl-tests' -b/-e/-f/-i, "
                          "not both");
    if (a.nccl_factor_opt->count() > 0 && a.step_bytes_opt->count() > 0 && a.nccl_factor > 1)
        throw ConfigError(SourceLocation{"-i " + a.step_bytes},
                          "-i (an increment) and -f (a factor) exclude each other");
    const auto size = [](const std::string& flag, const std::string& text) {
        const auto b = api::parse_nccl_size(text);
        if (!b)
            throw ConfigError(SourceLocation{flag + " " + text},
                              std::string("expected a size as nccl-tests writes it (8, 64K, "
                                          "1M, 8G: powers of 2) or with units ") +
                                  kBytesUnits);
        return *b;
    };
    // nccl-tests' defaults: 32M for a bound not given, increments of 1M unless -f > 1.
    const std::string first = a.min_opt->count() ? a.min_bytes : "32M";
    const std::string last = a.max_opt->count() ? a.max_bytes : "32M";
    const Bytes increment = size("-i", a.step_bytes);
    // Messages name the step as given: -f unless it is 1 (a bad factor included), else the
    // increment.
    char factor_text[32];
    std::snprintf(factor_text, sizeof factor_text, " -f %g", a.nccl_factor);
    const bool show_factor = a.nccl_factor != 1;
    auto sizes =
        api::nccl_size_sweep(size("-b", first), size("-e", last), a.nccl_factor, increment.value,
                             "-b " + first + " -e " + last +
                                 (show_factor ? std::string(factor_text) : " -i " + a.step_bytes));
    char text[64];
    if (a.nccl_factor > 1)
        std::snprintf(text, sizeof text, "%g(factor)", a.nccl_factor);
    else
        std::snprintf(text, sizeof text, "%lld(bytes)", static_cast<long long>(increment.value));
    return {std::move(sizes), text};
}

void run(const CollectiveArgs& a) {
    using namespace network;
    api::CollectiveRequest request;
    request.topology = a.topology;
    request.max_memory = api::parse_max_memory(a.max_memory);
    request.sets = a.sets;
    request.kind = pick("--op", a.op, kCollectiveNames);
    request.algorithm = parse_algorithm(a.algo, SourceLocation{"--algo " + a.algo});
    request.protocol = pick("--protocol", a.protocol, kProtocolNames);
    request.fidelity = pick("--network", a.model, kFidelityNames);
    const auto host = parse_time(a.host_overhead);
    if (!host)
        throw ConfigError(SourceLocation{"--host-overhead " + a.host_overhead},
                          std::string("expected a time in ") + kTimeUnits);
    request.host_overhead = *host;
    request.nominal = a.nominal;
    if (!a.calibration.empty() && a.nominal)
        throw ConfigError(SourceLocation{"--calibration " + a.calibration},
                          "--calibration goes on top of the measured defaults; drop --nominal");
    request.calibration = a.calibration;
    if (a.format != "table" && a.format != "nccl-tests")
        throw ConfigError(SourceLocation{"--format " + a.format},
                          "unknown value; expected table or nccl-tests");
    const auto type = api::find_nccl_data_type(a.data_type);
    if (!type)
        throw ConfigError(SourceLocation{"--datatype " + a.data_type},
                          std::string("unknown type; expected one of ") + api::kNcclDataTypes);
    request.data_type = *type;
    auto sweep = size_sweep(a);
    request.sizes = std::move(sweep.sizes);
    request.ranks_text = a.ranks;
    if (!a.ranks.empty()) request.ranks = api::parse_rank_list(a.ranks, "--ranks");
    OutputSet outputs;
    outputs.declare("--json", a.json);
    outputs.guard_input("--topology", a.topology);
    const auto report = api::run_collective(request);
    if (a.format == "nccl-tests")
        print_collective_nccl_tests(std::cout, request, report, sweep.step);
    else
        print_collective(std::cout, request, report);
    if (!a.json.empty())
        write_file_atomically(
            a.json, [&](std::ostream& out) { out << json_text(api::collective_json(report)); },
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
    args->sizes_opt = cmd->add_option("--sizes", args->sizes,
                                      "SIZE or FIRST:LAST: 1KiB:1GiB, or as nccl-tests writes "
                                      "sizes, 8:8G (K, M, G = 2^10, 2^20, 2^30 bytes)")
                          ->capture_default_str();
    args->step_factor_opt =
        cmd->add_option("--step-factor", args->step_factor, "Size multiplier between rows")
            ->capture_default_str();
    args->min_opt = cmd->add_option("-b,--minbytes", args->min_bytes,
                                    "nccl-tests' first size (8, 64K, 1M, 8G; default 32M)")
                        ->type_name("SIZE");
    args->max_opt =
        cmd->add_option("-e,--maxbytes", args->max_bytes, "nccl-tests' last size (default 32M)")
            ->type_name("SIZE");
    args->nccl_factor_opt =
        cmd->add_option("-f,--stepfactor", args->nccl_factor,
                        "nccl-tests' size multiplier (with -b/-e; 1 = use the increment -i)")
            ->type_name("FACTOR");
    args->step_bytes_opt = cmd->add_option("-i,--stepbytes", args->step_bytes,
                                           "nccl-tests' size increment when -f is 1 (default 1M)")
                               ->type_name("SIZE");
    cmd->add_option("-d,--datatype", args->data_type,
                    std::string("Element type of the count column: ") + api::kNcclDataTypes)
        ->capture_default_str();
    cmd->add_option("--format", args->format,
                    "table (default) or nccl-tests: nccl-tests' own output layout, which its "
                    "parsers read unchanged")
        ->capture_default_str();
    cmd->add_option("--algo", args->algo,
                    join(network::AlgorithmRegistry::builtin().names(), " | "))
        ->capture_default_str();
    cmd->add_option("--protocol", args->protocol,
                    join(names_of(network::kProtocolNames), " | ") +
                        ": NCCL's protocol (auto: as its tuning picks by size)")
        ->capture_default_str();
    cmd->add_option("--network", args->model, join(names_of(network::kFidelityNames), " | "))
        ->capture_default_str();
    cmd->add_flag("--nominal", args->nominal,
                  "Use nominal link capacities and no step overhead instead of the calibration");
    cmd->add_option("--calibration", args->calibration,
                    "A calibration file's network constants (clustersim calibrate --nccl-tests) "
                    "on top of the measured defaults")
        ->type_name("FILE");
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
