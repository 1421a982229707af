// One collective per size on an otherwise idle cluster, in nccl-tests' terms (size, count, time,
// algbw, busbw): what `clustersim collective` prints, so that it can be held against real
// nccl-tests output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/units.hpp"
#include "ingest/nccl_format.hpp"
#include "network/collectives.hpp"
#include "network/network.hpp"
#include "topology/topology_spec.hpp"

namespace cs::api {

struct CollectiveRequest {
    std::filesystem::path topology;
    std::vector<std::string> sets;  // overrides of the topology document
    network::CollectiveKind kind = network::CollectiveKind::AllReduce;
    std::vector<int> ranks;    // empty: every GPU
    std::string ranks_text;    // as the user wrote them, for messages
    std::vector<Bytes> sizes;  // as requested; each row simulates nccl_counts' size column
    NcclDataType data_type{"float", 4};
    network::Algorithm algorithm = network::Algorithm::Auto;
    // The NCCL protocol to run (`--protocol`), or Auto: as NCCL's tuning picks by size.
    network::Protocol protocol = network::Protocol::Auto;
    network::Fidelity fidelity = network::Fidelity::Flow;
    bool nominal = false;  // nominal link capacities, no step overheads, instead of calibrated
    // A calibration file's network constants on top of the measured defaults (clustersim
    // calibrate --nccl-tests); empty: none. Excludes `nominal`.
    std::filesystem::path calibration;
    Time host_overhead;  // added to every row (a launch from Python), not part of the network
    std::int64_t max_memory = topology::kDefaultMaxMemory;  // for building the topology
};

struct CollectiveRow {
    Bytes size;              // nccl-tests' size column (what was simulated)
    std::int64_t count = 0;  // nccl-tests' count column
    Time time;
    double algbw_GBps = 0, busbw_GBps = 0;
    network::Algorithm algorithm = network::Algorithm::Auto;  // the one used
    network::Protocol protocol = network::Protocol::Simple;   // the one used
};

struct CollectiveReport {
    std::string topology;  // display path
    int ranks = 0;
    std::vector<CollectiveRow> rows;     // one per size with at least one element per rank
    std::vector<Bytes> skipped;          // requested sizes that round to no element per rank
    std::vector<std::string> gpu_names;  // the ranks' GPU models, for nccl-tests' device lines
};

// Everything that can be wrong (ranks, algorithm for the operation) is checked before the first
// row is simulated. Throws ConfigError for bad input.
CollectiveReport run_collective(const CollectiveRequest& request);

// A JSON list of rows (`bytes`, `time_s`, `algbw_GBps`, `busbw_GBps`, `algorithm`, `protocol`).
nlohmann::json collective_json(const CollectiveReport& report);

}  // namespace cs::api
