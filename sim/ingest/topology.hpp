// A topology file built, checked and described: what `clustersim topology` shows.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "topology/cluster.hpp"
#include "topology/summary.hpp"
#include "topology/topology_spec.hpp"

namespace cs::api {

// A topology file with `--set`-style overrides (paths relative to the topology document), built
// with every check. Throws ConfigError for bad input.
struct LoadedTopology {
    std::string display_path;
    topology::Cluster cluster;
};
// Throws ConfigError for bad input and for a topology whose estimated memory exceeds `max_memory`.
LoadedTopology load_topology(const std::filesystem::path& path,
                             const std::vector<std::string>& sets,
                             std::int64_t max_memory = topology::kDefaultMaxMemory);

// The description `clustersim topology` gives (cli::print_topology prints it as text), as JSON.
nlohmann::json topology_json(const topology::TopologySummary& s);

// Graphviz lays out a few thousand vertices at most in reasonable time: to_dot of a larger
// cluster is refused (ConfigError naming `option`).
constexpr std::size_t kMaxDotDevices = 5000;
std::string topology_dot(const topology::Cluster& cluster, const std::string& option);

}  // namespace cs::api
