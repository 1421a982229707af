// Chakra execution traces in and out (docs/chakra.md): export an experiment's generated per-rank
// programs as a folder of ETs, and run a folder of ETs on a topology and network model.
// Warnings come back as data; nothing here prints or exits.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chakra/execute.hpp"
#include "chakra/program.hpp"
#include "core/atomic_file.hpp"
#include "network/network.hpp"
#include "workload/experiment.hpp"

namespace cs::api {

struct ChakraExportResult {
    int ranks = 0;
    std::size_t nodes = 0;
    std::vector<std::string> warnings;
};

// Writes `<prefix>.<rank>.et` per GPU of the layout and comm_groups.json into `folder`, staged
// in `outputs` (the caller commits). `schedule` empty: the experiment's own.
// `with_host`: also the host model's work (chakra::export_experiment). Each rank's ET is
// encoded and written as soon as it is complete (one rank's nodes in memory):
// estimate_export_bytes above `max_memory` (--max-memory) is refused first.
ChakraExportResult chakra_export(const workload::ExperimentSpec& spec, const std::string& schedule,
                                 const std::filesystem::path& folder, const std::string& prefix,
                                 OutputSet& outputs, bool with_host = false,
                                 std::int64_t max_memory = topology::kDefaultMaxMemory);
// An upper estimate of the memory chakra_export of `spec` takes: the run's (estimate_run_bytes)
// and one rank's nodes and bytes, from a per-node size measured on the Release build
// (docs/robustness.md). A double, so that absurd layouts cannot wrap.
double estimate_export_bytes(const workload::ExperimentSpec& spec);

struct ChakraRunRequest {
    std::filesystem::path folder;
    // The cluster and network: an experiment's (its topology and `network` section), or a
    // topology file with the default network (calibrated flow). Exactly one of the two.
    std::filesystem::path experiment;
    std::filesystem::path topology;
    std::vector<std::string> sets;             // overrides of the file given
    std::optional<network::Fidelity> network;  // --network: replaces the fidelity
    std::string rank_map;                      // "0-7,16-23": GPU of each rank; empty: in order
    // ASTRA-sim's network dimensions for involved_dim ("8,4": its npus_count, dimension 0 the
    // fastest-varying); empty: the topology's GPUs per node, then nodes (a generated cluster).
    std::string dims;
    std::optional<std::filesystem::path> trace;
    OutputSet* outputs = nullptr;
    // The memory the ETs may take once read (--max-memory; chakra::load_program).
    std::int64_t max_memory = topology::kDefaultMaxMemory;
};

struct ChakraRunResult {
    std::string cluster_source;  // the topology file
    chakra::Program program;
    chakra::ExecuteResult result;
    nlohmann::ordered_json summary;
    std::vector<std::string> warnings;  // the reader's: unknown types and attributes, ...
};

ChakraRunResult chakra_run(const ChakraRunRequest& request);

}  // namespace cs::api
