#include "session/chakra.hpp"

#include "chakra/export.hpp"
#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "ingest/topology.hpp"

namespace cs::api {

ChakraExportResult chakra_export(const workload::ExperimentSpec& spec, const std::string& schedule,
                                 const std::filesystem::path& folder, const std::string& prefix,
                                 OutputSet& outputs, bool with_host) {
    if (prefix.empty() || prefix.find('/') != std::string::npos)
        throw ConfigError(SourceLocation{"--prefix " + prefix},
                          "expected a file name prefix without '/' (files are <prefix>.<rank>.et)");
    chakra::EtSet set = chakra::export_experiment(spec, schedule, prefix, with_host);
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
    out.program = chakra::load_program(request.folder);
    out.warnings.insert(out.warnings.end(), out.program.warnings.begin(),
                        out.program.warnings.end());
    chakra::ExecuteOptions options;
    if (!request.rank_map.empty())
        options.rank_gpus = parse_rank_list(request.rank_map, "--rank-map");
    options.trace = request.trace;
    options.outputs = request.outputs;
    out.result = chakra::execute(out.program, *cluster, config, options);
    out.summary = chakra::to_json(out.program, out.result);
    out.summary["network"] = network::fidelity_name(config.fidelity);
    return out;
}

}  // namespace cs::api
