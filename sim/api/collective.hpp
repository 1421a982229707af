// One collective per size on an otherwise idle cluster, in nccl-tests' terms (size, count, time,
// algbw, busbw): what `clustersim collective` prints, so that it can be held against real
// nccl-tests output.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "core/units.hpp"
#include "network/collectives.hpp"
#include "network/network.hpp"
#include "topology/topology_spec.hpp"

namespace cs::api {

// "SIZE" or "FIRST:LAST" (with byte units), doubling (`factor`) from the first to the last.
// Throws ConfigError naming `--sizes` / `--step-factor`.
std::vector<Bytes> parse_size_range(const std::string& text, double factor);

struct CollectiveRequest {
    std::filesystem::path topology;
    std::vector<std::string> sets;  // overrides of the topology document
    network::CollectiveKind kind = network::CollectiveKind::AllReduce;
    std::vector<int> ranks;  // empty: every GPU
    std::string ranks_text;  // as the user wrote them, for messages
    std::vector<Bytes> sizes;
    network::Algorithm algorithm = network::Algorithm::Auto;
    network::Fidelity fidelity = network::Fidelity::Flow;
    bool nominal = false;  // nominal link capacities, no step overheads, instead of calibrated
    Time host_overhead;    // added to every row (a launch from Python), not part of the network
    std::int64_t max_memory = topology::kDefaultMaxMemory;  // for building the topology
};

struct CollectiveRow {
    Bytes size;  // nccl-tests' size column
    Time time;
    double algbw_GBps = 0, busbw_GBps = 0;
    network::Algorithm algorithm = network::Algorithm::Auto;  // the one used
};

struct CollectiveReport {
    std::string topology;  // display path
    int ranks = 0;
    std::vector<CollectiveRow> rows;  // one per size
};

// Everything that can be wrong (ranks, algorithm for the operation) is checked before the first
// row is simulated. Throws ConfigError for bad input.
CollectiveReport run_collective(const CollectiveRequest& request);

// The nccl-tests-like table, with a header naming the operation, ranks and network.
void print_collective(std::ostream& out, const CollectiveRequest& request,
                      const CollectiveReport& report);
// A JSON list of rows (`bytes`, `time_s`, `algbw_GBps`, `busbw_GBps`, `algorithm`).
nlohmann::json collective_json(const CollectiveReport& report);

}  // namespace cs::api
