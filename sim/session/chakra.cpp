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
    // Measured (Release, /usr/bin/time -f %M): the default experiment's 256 ranks, 2,040,832
    // nodes, peak at 1.66 GB, about 810 bytes per node with the run; 1 KiB leaves room.
    constexpr double kPerNode = 1024;
    const auto& l = spec.layout;
    const int chunks = std::max(2, l.vpp);
    const double layers = std::ceil(spec.model.layers / (static_cast<double>(l.pp) * chunks));
    const double passes = static_cast<double>(spec.training.microbatches(l)) * chunks * 3;
    const double nodes = static_cast<double>(l.world_size()) * passes * (8 + 4 * layers);
    return estimate_run_bytes(spec, chunks) + kPerNode * nodes;
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
        throw ConfigError(spec.layout_where,
                          std::string("chakra export would hold about ") + text +
                              " GB of ETs in memory (" + std::to_string(spec.layout.world_size()) +
                              " ranks, " + std::to_string(spec.training.microbatches(spec.layout)) +
                              " microbatches per replica), more than the limit of " +
                              format_bytes(Bytes{max_memory}) +
                              "; use fewer microbatches or GPUs, or raise the limit with "
                              "--max-memory");
    }
    chakra::EtSet set;
    try {
        set = chakra::export_experiment(spec, schedule, prefix, with_host);
    } catch (const ConfigError& e) {
        if (!e.where().file.empty()) throw;
        throw ConfigError(SourceLocation{spec.source}, e.message());
    }
    chakra::write_et_set(set, folder, outputs);
    ChakraExportResult out;
    out.ranks = static_cast<int>(set.files.size());
    for (const auto& f : set.files)
        out.nodes += f.nodes.size();
    out.warnings = std::move(set.warnings);
    return out;
}

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
    out.program = chakra::load_program(request.folder, request.max_memory);
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
