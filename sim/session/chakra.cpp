#include "session/chakra.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chakra/export.hpp"
#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "ingest/topology.hpp"
#include "session/run.hpp"

namespace cs::api {

double estimate_export_bytes(const workload::ExperimentSpec& spec) {
    // A pass writes a compute node, its collectives (a few per layer, each step's repeat) and
    // its waits: at most 8 + 4 per layer of its chunk. Chunks: vpp, and 2 for the V-shaped
    // schedules; passes: forward, backward and weight gradient per microbatch and chunk.
    // Measured (Release, /usr/bin/time -f %M) when every rank was held to the end: the default
    // experiment's 256 ranks, 2,040,832 nodes, peaked at 1.66 GB, about 810 bytes per node with
    // the run. Each rank's file is now written as soon as it is complete: one rank's nodes are
    // held, and its encoded bytes (about 115 bytes a node): 1 KiB per node of one rank, twice.
    constexpr double kPerNode = 1024;
    const auto& l = spec.layout;
    const int chunks = std::max(2, l.vpp);
    const double layers = std::ceil(spec.model.layers / (static_cast<double>(l.pp) * chunks));
    const double passes = static_cast<double>(spec.training.microbatches(l)) * chunks * 3;
    const double rank_nodes = passes * (8 + 4 * layers);
    return estimate_run_bytes(spec, chunks) + 2 * kPerNode * rank_nodes;
}

ChakraExportResult chakra_export(const workload::ExperimentSpec& spec, const std::string& schedule,
                                 const std::filesystem::path& folder, const std::string& prefix,
                                 OutputSet& outputs, bool with_host, std::int64_t max_memory) {
    if (prefix.empty() || prefix.find('/') != std::string::npos)
        throw ConfigError(SourceLocation{"--prefix " + prefix},
                          "expected a file name prefix without '/' (files are <prefix>.<rank>.et)");
    if (const double need = estimate_export_bytes(spec); need > static_cast<double>(max_memory)) {
        char text[32];
        std::snprintf(text, sizeof text, "%.3g", need / 1e9);
        throw ConfigError(
            spec.layout_where,
            std::string("chakra export would hold about ") + text + " GB in memory (the plan of " +
                std::to_string(spec.layout.world_size()) + " ranks and one rank's ET, " +
                std::to_string(spec.training.microbatches(spec.layout)) +
                " microbatches per replica), more than the limit of " +
                format_bytes(Bytes{max_memory}) +
                "; use fewer microbatches or GPUs, or raise the limit with "
                "--max-memory");
    }
    // Each rank's file is encoded and written as soon as it is complete (docs/performance.md):
    // one rank's nodes in memory, not the workload's.
    const int world = spec.layout.world_size();
    std::size_t nodes = 0;
    int ranks = 0;
    chakra::EtEncoder encoder;
    const chakra::RankSink sink = [&](int rank, chakra::EtFile& file) {
        // The folder once the export has passed its checks (a refused layout leaves none).
        if (ranks == 0) chakra::prepare_et_folder(folder, prefix, world, outputs);
        nodes += file.nodes.size();
        ++ranks;
        chakra::write_et_file(folder, prefix, rank, file, outputs, &encoder);
    };
    chakra::EtSet set;
    try {
        set = chakra::export_experiment(spec, schedule, prefix, with_host, sink);
    } catch (const ConfigError& e) {
        if (!e.where().file.empty()) throw;
        throw ConfigError(SourceLocation{spec.source}, e.message());
    }
    if (ranks == 0) chakra::prepare_et_folder(folder, prefix, world, outputs);
    chakra::write_comm_groups(folder, set.groups, outputs);
    ChakraExportResult out;
    out.ranks = ranks;
    out.nodes = nodes;
    out.warnings = std::move(set.warnings);
    return out;
}

namespace {

// ASTRA-sim's network dimensions that involved_dim refers to (chakra::load_program): --dims as
// given, else a generated cluster's GPUs per node and its nodes (0: as many as the ranks fill).
std::vector<int> network_dims(const std::string& text, const topology::Cluster& cluster) {
    if (text.empty()) {
        const auto& shape = cluster.generated_shape();
        if (!shape || shape->first_node != 0 || shape->gpus_per_node <= 0 ||
            static_cast<std::int64_t>(shape->nodes) * shape->gpus_per_node != cluster.gpu_count())
            return {};
        return {shape->gpus_per_node, 0};
    }
    const SourceLocation where{"--dims " + text};
    const std::string expected =
        "expected ASTRA-sim's npus_count: positive integers separated by commas, dimension 0 "
        "first (8,4: 4 nodes of 8 GPUs)";
    std::vector<int> dims;
    std::size_t at = 0;
    while (at <= text.size()) {
        const auto comma = std::min(text.find(',', at), text.size());
        const std::string item = text.substr(at, comma - at);
        if (item.empty() || item.size() > 9 ||
            !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
            std::stoi(item) <= 0)
            throw ConfigError(where, expected);
        dims.push_back(std::stoi(item));
        at = comma + 1;
    }
    return dims;
}

}  // namespace

ChakraRunResult chakra_run(const ChakraRunRequest& request) {
    if (request.experiment.empty() == request.topology.empty())
        throw ConfigError(
            "chakra run needs the cluster: give --topology TOPOLOGY.yaml (default network) or "
            "--experiment EXPERIMENT.yaml (its topology and network), not both");
    ChakraRunResult out;
    std::shared_ptr<const topology::Cluster> cluster;
    network::NetworkConfig config;
    if (!request.experiment.empty()) {
        auto spec = load_experiment({request.experiment, request.sets, ""});
        out.warnings = spec.warnings;
        cluster = spec.cluster;
        config = spec.network;
        out.cluster_source = spec.topology_source;
    } else {
        auto loaded = load_topology(request.topology, request.sets);
        out.cluster_source = loaded.display_path;
        cluster = std::make_shared<const topology::Cluster>(std::move(loaded.cluster));
        config = network::NetworkConfig::calibrated(network::Fidelity::Flow);
    }
    if (request.network) config.fidelity = *request.network;
    out.program = chakra::load_program(request.folder, request.max_memory,
                                       network_dims(request.dims, *cluster));
    out.warnings.insert(out.warnings.end(), out.program.warnings.begin(),
                        out.program.warnings.end());
    chakra::ExecuteOptions options;
    if (!request.rank_map.empty())
        options.rank_gpus = parse_rank_list(request.rank_map, "--rank-map");
    options.trace = request.trace;
    options.outputs = request.outputs;
    try {
        out.result = chakra::execute(out.program, *cluster, config, options);
    } catch (const ClockOverflow& e) {
        // Every time of the replay comes from the ETs' durations, sizes and FLOPs.
        throw ConfigError(SourceLocation{request.folder.string()},
                          "the ETs run longer than the simulator's clock can hold (2^63 ps, "
                          "about 106 days): " +
                              std::string(e.what()) +
                              "; check the nodes' duration_micros, num_ops, tensor_size and "
                              "comm_size");
    } catch (const NoPathError& e) {
        // The ETs send between two GPUs the topology does not join (a route would transit a GPU).
        throw unreachable_gpu_error(
            e, SourceLocation{out.cluster_source},
            ", which the ETs in " + request.folder.string() + " send data between,");
    }
    out.summary = chakra::to_json(out.program, out.result);
    out.summary["network"] = network::fidelity_name(config.fidelity);
    return out;
}

}  // namespace cs::api
