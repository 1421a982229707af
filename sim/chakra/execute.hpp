// Runs a Program (program.hpp) as events on a cluster's network model: every rank's nodes start
// when their dependencies have completed, compute nodes one at a time per rank (per GPU, and per
// host for is_cpu_op nodes), transfers and collectives on the shared network so that they contend
// for links, as the replay's pipeline and DP traffic does. Collectives marked cs_costed_alone take
// their stand-alone time (replay::CollectiveCosts), as the replay's TP/CP/EP collectives do.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chakra/program.hpp"
#include "core/atomic_file.hpp"
#include "network/network.hpp"
#include "report/summary.hpp"
#include "topology/cluster.hpp"

namespace cs::chakra {

struct ExecuteOptions {
    // GPU of each rank; empty: rank r on GPU r. Checked against the cluster (ConfigError).
    std::vector<int> rank_gpus;
    std::string rank_map_option = "--rank-map";  // names the mapping in errors
    std::optional<std::filesystem::path> trace;  // a timeline (.json or .pftrace), per rank
    OutputSet* outputs = nullptr;
};

struct RankStats {
    int gpu = 0;
    Time compute_busy;  // GPU compute nodes
    Time end;           // its last node's end
};

struct ExecuteResult {
    Time iteration_time;  // first node start (0) to last node end (a message's arrival included)
    std::uint64_t events = 0;
    std::vector<RankStats> ranks;
    std::vector<report::LinkSummary> links;  // links that carried traffic, busiest first
};

// Throws ConfigError for ranks without a GPU, and for a workload that stops before every node
// ran (a collective or receive that never meets its peers, named by file and node id).
ExecuteResult execute(const Program& program, const topology::Cluster& cluster,
                      const network::NetworkConfig& config, const ExecuteOptions& options = {});

// The summary of `clustersim chakra run --json`.
nlohmann::ordered_json to_json(const Program& program, const ExecuteResult& result);

}  // namespace cs::chakra
