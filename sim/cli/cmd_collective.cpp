// clustersim collective --topology T.yaml [--set k=v]... --op all_reduce --ranks 0-7
//                       --sizes 1KiB:1GiB [--step-factor 2] [--algo ring] [--json FILE]
//
// Simulates one collective per size on an otherwise idle cluster and prints the rows the way
// nccl-tests does (size, count, type, time, algbw, busbw), so they can be held against real
// nccl-tests output.
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/quantity.hpp"
#include "engine/simulation.hpp"
#include "network/collectives.hpp"
#include "network/network.hpp"
#include "topology/topology_yaml.hpp"

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

std::vector<Bytes> parse_sizes(const std::string& text, double factor) {
    const SourceLocation where{"--sizes " + text};
    const auto colon = text.find(':');
    const std::string first = text.substr(0, colon);
    const std::string last = colon == std::string::npos ? first : text.substr(colon + 1);
    const auto a = parse_bytes(first), b = parse_bytes(last);
    if (!a || !b)
        throw ConfigError(where,
                          std::string("expected SIZE or FIRST:LAST with units ") + kBytesUnits);
    if (a->value <= 0 || b->value < a->value)
        throw ConfigError(where, "sizes must be positive and the last at least the first");
    if (!(factor > 1))
        throw ConfigError(SourceLocation{"--step-factor"}, "the step factor must exceed 1");
    std::vector<Bytes> out;
    for (double s = static_cast<double>(a->value); s <= static_cast<double>(b->value) * (1 + 1e-12);
         s *= factor)
        out.push_back(Bytes{std::llround(s)});
    return out;
}

void run(const CollectiveArgs& a) {
    using namespace network;
    const auto kind = pick("--op", a.op, kCollectiveNames);
    const auto algo = parse_algorithm(a.algo, SourceLocation{"--algo " + a.algo});
    const auto fidelity = pick("--network", a.model, kFidelityNames);
    const auto host = parse_time(a.host_overhead);
    if (!host)
        throw ConfigError(SourceLocation{"--host-overhead " + a.host_overhead},
                          std::string("expected a time in ") + kTimeUnits);
    const auto sizes = parse_sizes(a.sizes, a.step_factor);

    auto doc = config::load_document(a.topology);
    for (const auto& s : a.sets) {
        const auto [key, value] = config::split_assignment(s);
        config::apply_override(doc, key, value);
    }
    const topology::Cluster cluster = topology::load_cluster(doc);

    std::vector<int> ranks;
    if (a.ranks.empty()) {
        for (int g = 0; g < cluster.gpu_count(); ++g)
            ranks.push_back(g);
    } else {
        ranks = parse_rank_list(a.ranks, "--ranks");
    }
    for (int r : ranks)
        if (r >= cluster.gpu_count())
            throw ConfigError(SourceLocation{"--ranks " + a.ranks},
                              "GPU " + std::to_string(r) + " does not exist; " + doc.display_path +
                                  " has GPUs 0-" + std::to_string(cluster.gpu_count() - 1));
    if (ranks.size() < 2 && kind != CollectiveKind::Broadcast)
        throw ConfigError(SourceLocation{"--ranks " + a.ranks}, "a collective needs two ranks");

    // Check everything that can be wrong before the first row is printed.
    std::vector<Algorithm> used;
    for (Bytes size : sizes)
        used.push_back(resolve_algorithm(cluster, kind, ranks, size, algo));
    if (!a.json.empty()) {
        const auto folder = std::filesystem::path(a.json).parent_path();
        std::error_code ec;
        if (!folder.empty() && !std::filesystem::is_directory(folder, ec))
            throw ConfigError(SourceLocation{"--json " + a.json},
                              "folder '" + folder.string() + "' does not exist");
    }

    const NetworkConfig config =
        a.nominal ? NetworkConfig{fidelity} : NetworkConfig::calibrated(fidelity);
    const double factor = busbw_factor(kind, static_cast<int>(ranks.size()));

    struct Client : TransferClient {
        Time done = Time::max();
        void on_transfer_done(Simulation& sim, std::uint64_t) override { done = sim.now(); }
    };

    std::printf(
        "# clustersim collective: %s on %zu ranks of %s, network %s (%s)%s\n",
        collective_name(kind), ranks.size(), doc.display_path.c_str(), fidelity_name(fidelity),
        a.nominal ? "nominal links" : "calibrated",
        *host > Time::zero() ? (", plus " + format_time(*host) + " host launch").c_str() : "");
    std::printf("#\n");
    std::printf("#%11s  %12s  %8s  %10s  %7s  %7s  %s\n", "size", "count", "type", "time", "algbw",
                "busbw", "algorithm");
    std::printf("#%11s  %12s  %8s  %10s  %7s  %7s\n", "(B)", "(elements)", "", "(us)", "(GB/s)",
                "(GB/s)");
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        const Bytes size = sizes[i];
        Simulation sim;
        auto net = make_network(sim, cluster, config);
        Client client;
        net->set_client(&client);
        const GroupId g = net->register_group(ranks);
        net->collective(kind, g, size, used[i], 1);
        sim.run();
        if (client.done == Time::max())
            throw SimulationError("cli", "the collective never completed", sim.now());
        const Time t = client.done + *host;
        const double seconds = t.seconds();
        const double algbw = seconds > 0 ? static_cast<double>(size.value) / seconds * 1e-9 : 0;
        const double busbw = algbw * factor;
        std::printf("%12lld  %12lld  %8s  %10.2f  %7.2f  %7.2f  %s\n",
                    static_cast<long long>(size.value), static_cast<long long>(size.value / 4),
                    "float", seconds * 1e6, algbw, busbw, algorithm_name(used[i]).c_str());
        nlohmann::json row;
        row["bytes"] = size.value;
        row["time_s"] = seconds;
        row["algbw_GBps"] = algbw;
        row["busbw_GBps"] = busbw;
        row["algorithm"] = algorithm_name(used[i]);
        rows.push_back(std::move(row));
    }
    if (!a.json.empty())
        write_file_atomically(a.json, [&](std::ostream& out) { out << rows.dump(2) << "\n"; });
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
    cmd->callback([args] { run(*args); });
}

}  // namespace cs::cli
