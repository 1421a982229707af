#include "ingest/topology.hpp"

#include <cstdio>

#include "config/document.hpp"
#include "core/errors.hpp"
#include "topology/topology_yaml.hpp"

namespace cs::api {

LoadedTopology load_topology(const std::filesystem::path& path,
                             const std::vector<std::string>& sets, std::int64_t max_memory) {
    auto doc = config::load_document(path);
    for (const auto& s : sets) {
        const auto [key, value] = config::split_assignment(s);
        config::apply_override(doc, key, value);
    }
    return LoadedTopology{doc.display_path, topology::load_cluster(doc, max_memory)};
}

nlohmann::json topology_json(const topology::TopologySummary& s) {
    nlohmann::json j;
    j["gpus"] = s.gpus;
    j["nodes"] = s.nodes;
    j["fabric"] = s.fabric;
    j["devices_by_kind"] = s.devices_by_kind;
    j["links_by_kind"] = s.links_by_kind;
    nlohmann::json by_tier = nlohmann::json::object();
    for (const auto& [tier, n] : s.switches_by_tier)
        by_tier[std::to_string(tier)] = n;
    j["switches_by_tier"] = by_tier;
    j["intra_node_bandwidth_per_gpu_GBps"] = s.intra_node_bandwidth_per_gpu.gb_per_s();
    j["inter_node_bandwidth_per_gpu_GBps"] = s.inter_node_bandwidth_per_gpu.gb_per_s();
    j["bisection_bandwidth_GBps"] =
        s.bisection_bandwidth ? nlohmann::json(s.bisection_bandwidth->gb_per_s()) : nullptr;
    j["diameter_hops"] = s.diameter_hops;
    j["routing"] = s.routing;
    return j;
}

std::string topology_dot(const topology::Cluster& cluster, const std::string& option) {
    if (cluster.devices().size() > kMaxDotDevices)
        throw ConfigError(SourceLocation{option},
                          "the graph has " + std::to_string(cluster.devices().size()) +
                              " devices, more than Graphviz draws usefully (" +
                              std::to_string(kMaxDotDevices) +
                              "); use --set nodes=2 to draw a smaller cluster of the same shape");
    return topology::to_dot(cluster);
}

}  // namespace cs::api
