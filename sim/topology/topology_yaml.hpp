// Topology documents (YAML) -> TopologySpec -> frozen Cluster. The schema is documented in
// docs/yaml/topology.md. Parsing is strict (config::Reader); building checks connectivity.
#pragma once

#include <string>
#include <vector>

#include "config/document.hpp"
#include "topology/cluster.hpp"
#include "topology/topology_spec.hpp"

namespace cs::topology {

// The bundled GPU catalogue (A100-SXM4-80GB, H100-SXM, H200-SXM, ...), under their usual names.
const std::vector<GpuModel>& gpu_catalog();
// A catalogue entry by name or short alias ("H100" -> "H100-SXM"); nullptr if unknown.
const GpuModel* find_catalog_model(const std::string& name);
// Every accepted catalogue name and alias, for error messages.
std::vector<std::string> catalog_names();

// Parses and builds the cluster a topology document describes. Throws ConfigError naming
// file:line:column for any problem (unknown keys or devices, missing units, disconnected GPUs...).
Cluster load_cluster(const config::Document& doc, std::int64_t max_memory = kDefaultMaxMemory);

}  // namespace cs::topology
