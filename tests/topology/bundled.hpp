// Loads a bundled topology of topologies/ for the topology tests, optionally with `nodes` set.
#pragma once

#include <string>

#include "config/document.hpp"
#include "topology/topology_yaml.hpp"

namespace cs::test {

inline topology::Cluster load_bundled(const std::string& name, const std::string& nodes = "") {
    auto doc = config::load_document(std::string(CLUSTERSIM_SOURCE_DIR) + "/topologies/" + name);
    if (!nodes.empty()) config::apply_override(doc, "nodes", nodes);
    return topology::load_cluster(doc);
}

}  // namespace cs::test
