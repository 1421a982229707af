// clustersim topology TOPOLOGY.yaml [--set k=v]... [--json FILE] [--dot FILE]
//
// Builds the cluster a topology file describes (every check included) and describes it: the GPU
// count on a line of its own, devices and links by kind, per-GPU bandwidth inside and between
// nodes, bisection bandwidth and diameter. --dot writes the graph for Graphviz (small graphs).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "topology/summary.hpp"
#include "topology/topology_yaml.hpp"

namespace cs::cli {

namespace {

// Graphviz lays out a few thousand vertices at most in reasonable time.
constexpr std::size_t kMaxDotDevices = 5000;

struct TopologyArgs {
    std::string topology;
    std::vector<std::string> sets;
    std::string json;
    std::string dot;
};

std::string counts_text(const std::map<std::string, int>& counts) {
    std::string out;
    for (const auto& [kind, n] : counts)
        out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
    return out.empty() ? "none" : out;
}

void run(const TopologyArgs& a) {
    auto doc = config::load_document(a.topology);
    for (const auto& s : a.sets) {
        const auto [key, value] = config::split_assignment(s);
        config::apply_override(doc, key, value);
    }
    const topology::Cluster cluster = topology::load_cluster(doc);
    if (!a.dot.empty() && cluster.devices().size() > kMaxDotDevices)
        throw ConfigError(SourceLocation{"--dot " + a.dot},
                          "the graph has " + std::to_string(cluster.devices().size()) +
                              " devices, more than Graphviz draws usefully (" +
                              std::to_string(kMaxDotDevices) +
                              "); use --set nodes=2 to draw a smaller cluster of the same shape");
    const topology::TopologySummary s = topology::summarize(cluster);

    std::string tiers;
    for (const auto& [tier, n] : s.switches_by_tier)
        tiers += (tiers.empty() ? "" : ", ") + std::to_string(n) + " tier " + std::to_string(tier);
    std::printf("topology: %s (%s)\n", doc.display_path.c_str(), s.fabric.c_str());
    std::printf("gpus: %d\n", s.gpus);
    std::printf("nodes: %d\n", s.nodes);
    std::printf("devices: %s%s\n", counts_text(s.devices_by_kind).c_str(),
                tiers.empty() ? "" : (" (switches: " + tiers + ")").c_str());
    std::printf("links: %s (physical links; each direction has the full capacity)\n",
                counts_text(s.links_by_kind).c_str());
    std::printf("per-GPU bandwidth inside a node: %s each way\n",
                format_bandwidth(s.intra_node_bandwidth_per_gpu).c_str());
    std::printf("per-GPU bandwidth between nodes: %s\n",
                s.nodes > 1
                    ? (format_bandwidth(s.inter_node_bandwidth_per_gpu) + " each way").c_str()
                    : "none (one node)");
    std::printf("bisection bandwidth: %s\n",
                s.bisection_bandwidth
                    ? (format_bandwidth(*s.bisection_bandwidth) + " each way").c_str()
                    : "not derived (explicit topology)");
    std::printf("diameter: %d %s\n", s.diameter_hops, s.diameter_hops == 1 ? "hop" : "hops");

    if (!a.json.empty()) {
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
        write_file_atomically(a.json, [&](std::ostream& out) { out << j.dump(2) << "\n"; });
    }
    if (!a.dot.empty())
        write_file_atomically(a.dot, [&](std::ostream& out) { out << topology::to_dot(cluster); });
}

}  // namespace

void register_topology(CLI::App& app) {
    auto args = std::make_shared<TopologyArgs>();
    auto* cmd = app.add_subcommand(
        "topology", "Build a topology, check it and describe it (GPUs, links, bandwidth, hops)");
    cmd->add_option("topology", args->topology, "Topology YAML")->required();
    cmd->add_option("--set", args->sets, "Override a key of the topology file: nodes=64")
        ->type_name("KEY=VALUE");
    cmd->add_option("--json", args->json, "Write the description as JSON");
    cmd->add_option("--dot", args->dot, "Write the graph in Graphviz format (small graphs)");
    cmd->callback([args] { run(*args); });
}

}  // namespace cs::cli
